/*
 * sagemaker.h - the SageMaker container contract, for dp-train (a training
 * job) and dp-eval (a processing job): the files SageMaker lays out under
 * /opt/ml turned into the tools' own options, so that a container with
 * nothing but dptools in it runs as a job.  See SAGEMAKER in dp-train(1)
 * and dp-eval(1).
 *
 * A tool calls its function first thing in main, before its own option
 * parsing, which then reads the argv given back:
 *
 *     sm_train_args(&argc, &argv, longopts);     dp-train
 *     sm_eval_args(&argc, &argv, longopts);      dp-eval
 *
 * SageMaker mode is asked for by --sagemaker or --sagemaker=ROOT anywhere
 * in argv (taken out), or, for dp-train, by the lone argument "train"
 * (SageMaker starts a training container as `docker run IMAGE train`).
 * Nothing is detected from the environment or the files alone.  The root
 * is ROOT, else the setting DP_SAGEMAKER_ROOT, else /opt/ml.  In
 * SageMaker mode the new argv is argv[0], the options the job's files
 * give (channels, model and checkpoint paths: only those the rest leave
 * out), the hyperparameters as options, then the rest of argv, whose
 * options come last and so win; and cli.failure_file is set, so that any
 * failure's message lands where SageMaker reads it.  A bad file or
 * hyperparameter ends the program (exit 1 or 2), its message in the
 * failure file.  Returns 1 in SageMaker mode; 0, argv untouched, if not.
 */
#ifndef DP_SAGEMAKER_H
#define DP_SAGEMAKER_H

#include <getopt.h>

int sm_train_args(int *argc, char ***argv, const struct option *opts);
int sm_eval_args(int *argc, char ***argv, const struct option *opts);
/* dp-serve: asked for by the lone argument "serve" (`docker run IMAGE
 * serve`) or --sagemaker; the model from ROOT/model (SM_MODEL_DIR): a
 * .safetensors file or a model.tar.gz holding one; SAGEMAKER_BIND_TO_PORT,
 * SAGEMAKER_MODEL_SERVER_WORKERS and SAGEMAKER_MODEL_SERVER_TIMEOUT as
 * --port, --workers and --timeout; --bind 0.0.0.0. */
int sm_serve_args(int *argc, char ***argv, const struct option *opts);

#endif
