/*
 * dp-train - train a neural network from TFRecord files of tf.train.Example.
 *
 * This file is the command line around libdp: options, messages, the
 * training loop and its logs.  The model (dp_nn.h), the math (dp_backend.h),
 * the optimizers (dp_optim.h), the input pipeline (dp_data.h), the
 * checkpoints (dp_ckpt.h), the talk between workers (dp_comm.h) and the
 * step itself (dp_train.h) are all in the library.  A step is: the next
 * batch (dp_data_next), the ranks' sample counts (dp_step_agree), then
 * dp_step_run: forward, loss, backward with each layer's gradients
 * summed over the ranks as they are ready, optimizer update (with
 * --accumulate, --freeze and --sync-bn: lib/train/step.c).  Under mpirun
 * every rank runs this same loop in lockstep; rank 0 alone logs and
 * writes checkpoints.  Validation is dp-eval's pass
 * (dp_eval.h).  See dp-train(1) (DISTRIBUTED) and dp-checkpoint(5).
 * The run's glue is in lib/train too, behind dp_train.h: what the ranks
 * agree on (agree.c), the data options of the settings (data.c), a
 * checkpoint resumed (resume.c), the run in words (summary.c) and
 * TensorBoard's files (tensorboard.c); this file says what they return.
 *
 * The file reads: options, messages, the pieces of the run (logs,
 * checkpoints, data, the job), then validation, set-up, the epochs and
 * the finish, which main calls in that order.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "cli_input.h"
#include "sagemaker.h"
#include "dp.h"
#include "dp_backend.h"
#include "dp_ckpt.h"
#include "dp_comm.h"
#include "dp_data.h"
#include "dp_eval.h"
#include "dp_events.h"
#include "dp_hash.h"
#include "dp_nn.h"
#include "dp_optim.h"
#include "dp_serve.h"
#include "dp_train.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef DP_PROG
#define DP_PROG "dp-train"
#endif

/* Exit statuses past cli.h's (dp-train(1), EXIT STATUS); never renumbered. */
enum { TRAIN_DIVERGED = 3 }; /* the loss is not finite */

/* ---- the command line ----------------------------------------------------- */

enum {
	O_TRAIN = 256, O_TRAIN_CMD, O_VAL, O_VAL_CMD,
	O_SHUFFLE, O_LAST_BATCH, O_CACHE, O_CACHE_LIMIT, O_CACHE_DIR, O_PREFETCH, O_MODEL,
	O_INPUT_SHAPE, O_LOSS, O_SUMMARY, O_EPOCHS, O_MAX_STEPS, O_BATCH, O_OPTIMIZER, O_LR,
	O_MOMENTUM, O_NESTEROV, O_DAMPENING, O_BETA1, O_BETA2, O_EPS, O_WD, O_SCHEDULE, O_WARMUP,
	O_SEED, O_THREADS, O_GPU, O_PRECISION, O_DETERMINISTIC, O_CKPT_EVERY, O_CKPT, O_RESUME, O_INIT, O_LOG_FORMAT,
	O_LOG, O_LOG_EVERY, O_PROGRESS, O_NO_PROGRESS,
	O_SHARD_DATA, O_NO_SHARD_DATA, O_UNEVEN, O_SCALE_LR, O_WARMUP_EPOCHS, O_STEPS_PER_EPOCH, O_NO_OVERLAP,
	O_BUCKET, O_LOG_ALL, O_TIMELINE, O_STALL, O_STALL_ABORT, O_GRAD_DTYPE, O_ALLREDUCE,
	O_TENSORBOARD, O_TB_HIST, O_ON_EPOCH, O_ON_EPOCH_FAIL, O_ACCUMULATE, O_CLIP_NORM,
	O_RESET, O_FREEZE, O_LR_MULT, O_NO_DECAY, O_SMOOTH, O_CLASSES, O_SYNC_BN,
	O_MONITOR, O_MONITOR_MODE, O_EARLY_STOP, O_PLATEAU, O_SAVE_BEST, O_RECOMPUTE,
	O_PIPE_STAGES, O_MICRO, O_PIPE_SCHED, O_MEMORY_LIMIT, O_LAST
};

static const struct option longopts[] = {
	{"train", required_argument, 0, O_TRAIN},
	{"train-cmd", required_argument, 0, O_TRAIN_CMD},
	{"val", required_argument, 0, O_VAL},
	{"val-cmd", required_argument, 0, O_VAL_CMD},
	CLI_INPUT_OPTIONS,
	{"augment", required_argument, 0, CLI_IN_IMAGE},
	{"shuffle-buffer", required_argument, 0, O_SHUFFLE},
	{"last-batch", required_argument, 0, O_LAST_BATCH},
	{"cache", required_argument, 0, O_CACHE},
	{"cache-limit", required_argument, 0, O_CACHE_LIMIT},
	{"cache-dir", required_argument, 0, O_CACHE_DIR},
	{"prefetch", required_argument, 0, O_PREFETCH},
	{"model", required_argument, 0, O_MODEL},
	{"input-shape", required_argument, 0, O_INPUT_SHAPE},
	{"loss", required_argument, 0, O_LOSS},
	{"summary", no_argument, 0, O_SUMMARY},
	{"recompute", optional_argument, 0, O_RECOMPUTE},
	{"epochs", required_argument, 0, O_EPOCHS},
	{"max-steps", required_argument, 0, O_MAX_STEPS},
	{"batch-size", required_argument, 0, O_BATCH},
	{"optimizer", required_argument, 0, O_OPTIMIZER},
	{"lr", required_argument, 0, O_LR},
	{"momentum", required_argument, 0, O_MOMENTUM},
	{"nesterov", no_argument, 0, O_NESTEROV},
	{"dampening", required_argument, 0, O_DAMPENING},
	{"beta1", required_argument, 0, O_BETA1},
	{"beta2", required_argument, 0, O_BETA2},
	{"eps", required_argument, 0, O_EPS},
	{"weight-decay", required_argument, 0, O_WD},
	{"lr-schedule", required_argument, 0, O_SCHEDULE},
	{"warmup", required_argument, 0, O_WARMUP},
	{"seed", required_argument, 0, O_SEED},
	{"threads", required_argument, 0, O_THREADS},
	{"gpu", required_argument, 0, O_GPU},
	{"precision", required_argument, 0, O_PRECISION},
	{"deterministic", no_argument, 0, O_DETERMINISTIC},
	{"checkpoint-every", required_argument, 0, O_CKPT_EVERY},
	{"checkpoint", required_argument, 0, O_CKPT},
	{"resume", required_argument, 0, O_RESUME},
	{"init", required_argument, 0, O_INIT},
	{"reset", required_argument, 0, O_RESET},
	{"freeze", required_argument, 0, O_FREEZE},
	{"classes", required_argument, 0, O_CLASSES},
	{"sync-bn", no_argument, 0, O_SYNC_BN},
	{"lr-mult", required_argument, 0, O_LR_MULT},
	{"no-decay", required_argument, 0, O_NO_DECAY},
	{"label-smoothing", required_argument, 0, O_SMOOTH},
	{"output", required_argument, 0, 'o'},
	{"log-format", required_argument, 0, O_LOG_FORMAT},
	{"log", required_argument, 0, O_LOG},
	{"log-every", required_argument, 0, O_LOG_EVERY},
	{"progress", no_argument, 0, O_PROGRESS},
	{"no-progress", no_argument, 0, O_NO_PROGRESS},
	{"quiet", no_argument, 0, 'q'},
	{"shard-data", no_argument, 0, O_SHARD_DATA},
	{"no-shard-data", no_argument, 0, O_NO_SHARD_DATA},
	{"uneven", required_argument, 0, O_UNEVEN},
	{"scale-lr", no_argument, 0, O_SCALE_LR},
	{"warmup-epochs", required_argument, 0, O_WARMUP_EPOCHS},
	{"steps-per-epoch", required_argument, 0, O_STEPS_PER_EPOCH},
	{"no-overlap", no_argument, 0, O_NO_OVERLAP},
	{"bucket-size", required_argument, 0, O_BUCKET},
	{"grad-dtype", required_argument, 0, O_GRAD_DTYPE},
	{"allreduce", required_argument, 0, O_ALLREDUCE},
	{"log-all-ranks", no_argument, 0, O_LOG_ALL},
	{"timeline", required_argument, 0, O_TIMELINE},
	{"stall-timeout", required_argument, 0, O_STALL},
	{"stall-abort", required_argument, 0, O_STALL_ABORT},
	{"tensorboard", required_argument, 0, O_TENSORBOARD},
	{"tensorboard-histograms", no_argument, 0, O_TB_HIST},
	{"on-epoch", required_argument, 0, O_ON_EPOCH},
	{"on-epoch-fail", no_argument, 0, O_ON_EPOCH_FAIL},
	{"accumulate", required_argument, 0, O_ACCUMULATE},
	{"clip-norm", required_argument, 0, O_CLIP_NORM},
	{"pipeline-stages", required_argument, 0, O_PIPE_STAGES},
	{"micro-batches", required_argument, 0, O_MICRO},
	{"pipeline-schedule", required_argument, 0, O_PIPE_SCHED},
	{"memory-limit", required_argument, 0, O_MEMORY_LIMIT},
	{"monitor", required_argument, 0, O_MONITOR},
	{"monitor-mode", required_argument, 0, O_MONITOR_MODE},
	{"early-stopping", required_argument, 0, O_EARLY_STOP},
	{"reduce-lr-on-plateau", required_argument, 0, O_PLATEAU},
	{"save-best", required_argument, 0, O_SAVE_BEST},
	CLI_OPTIONS_END,
};

/* The run's settings that checkpoints keep (dp_ckpt.h): the model, the
 * data's decoding, the optimization; the rest of the options in O. */
static dp_run_conf C;

static struct {
	const char **train, **val;
	size_t ntrain, nval;
	const char *train_cmd, *val_cmd;
	/* the input's options; those of the run's settings go to C
	 * (input_options) */
	struct cli_input in;
	int cache;
	uint64_t cache_limit;
	const char *cache_dir;
	int prefetch;
	int summary;
	const char *recompute; /* --recompute: patterns; "": every innermost block */
	uint64_t max_steps;
	int threads;
	int gpu;           /* -1: the local rank's GPU */
	int deterministic; /* --deterministic: convolution algorithms pinned, not timed */
	uint64_t ckpt_every;
	int ckpt_epochs; /* ckpt_every counts epochs */
	const char *ckpt, *output, *resume, *init;
	const char *save_best; /* --save-best PATH */
	const char *reset; /* fine-tuning: patterns */
	int classes;    /* --classes of a named model (0: its default) */
	char **names;   /* --classes NAMES (one block), nnames of them */
	size_t nnames;
	int json;
	const char *log;
	uint64_t log_every;
	int progress; /* -1 auto */
	int quiet;
	/* data parallelism */
	int shard;       /* -1 auto: split shared sources; 0 no; 1 yes */
	int uneven_drop; /* an epoch ends when a rank's data does */
	int overlap;
	uint64_t bucket;
	int wire, algo; /* --grad-dtype, --allreduce (DP_WIRE_*, DP_ALLREDUCE_*) */
	int log_all;
	const char *timeline;
	/* pipeline stages (dp_train.h): S (1: none), micro-batches a step (0:
	 * the default), the schedule */
	int stages;
	uint64_t micro;
	int psched;
	uint64_t mem_limit; /* --memory-limit: bytes a rank's model may take (0: any) */
	double stall, stall_abort;
	const char *tensorboard, *on_epoch; /* --tensorboard DIR, --on-epoch CMD */
	int tb_hist, on_epoch_fail;
	char given[O_LAST]; /* options given on the command line */
} O = {
	.shard = -1,
	.overlap = 1,
	.bucket = 1u << 20,
	.stall = 60,
	.prefetch = 2,
	.threads = 0, /* the host's CPUs shared by its ranks (dp_default_threads) */
	.gpu = -1,
	.log_every = 100,
	.progress = -1,
	.stages = 1,
};

static void classes_opt(const char *v);

static const char usage_line[] =
	"usage: dp-train --train FILE... | --train-cmd CMD  --model SPEC --input-shape CxHxW\n"
	"                [--epochs N] [--batch-size N] [--optimizer sgd|adam|adamw] [--lr X]\n"
	"                [-o CHECKPOINT] ...   (dp-train --help lists every option)\n";

static const char help_text[] =
	"usage: dp-train [OPTION]...\n"
	"Train a neural network on TFRecord files of tf.train.Example (see dp-train(1)).\n"
	"\n"
	"Data:\n"
	"      --train PATH         training records: file, glob, FIFO or - (stdin); repeatable;\n"
	"                           {rank} and {size} are filled in\n"
	"      --train-cmd CMD      run CMD (sh -c) each epoch and read its stdout instead;\n"
	"                           {epoch} (from 1), {rank}, {size} are filled in\n"
	"      --val PATH           validation records, evaluated after each epoch; repeatable\n"
	"      --val-cmd CMD        a command giving validation records each epoch\n"
	"      --feature NAME       the input feature (default image)\n"
	"      --label NAME         the label feature (default label): an int64 class\n"
	"                           (xent) or floats of the output size (mse)\n"
	"      --decode-raw TYPE    read a bytes feature as raw uint8, float32 or float64\n"
	"      --layout chw|hwc     raw arrays are C x H x W (default) or channels-last\n"
	"      --decode image       the feature is an image file (JPEG, PNG, WebP, TIFF,\n"
	"                           BMP, PPM, PGM: tfrecord(5); with\n"
	"                           --feature image/encoded --label image/class/label),\n"
	"                           decoded and resized to the input shape's C x H x W\n"
	"      --mean M[,M,M]       per channel, subtracted after --scale (default 0)\n"
	"      --std S[,S,S]        per channel, divided by after --mean (default 1)\n"
	"      --augment LIST       training images: random-resized-crop (scale=MIN:MAX,\n"
	"                           ratio=MIN:MAX), crop-pad=N, flip, none\n"
	"      --resize N           validation images: shorter side to N, then the\n"
	"                           center crop (default with random-resized-crop: H/0.875)\n"
	"      --max-pixels N       larger images are refused (default 89478485)\n"
	"      --decode-threads N   threads decoding beside the reader (default 0)\n"
	"      --skip-corrupt       skip (and count) images that do not decode\n"
	"      --max-record SIZE    longest record accepted (default 256M; k, M, G)\n"
	"      --max-skipped N|P%  with --skip-corrupt: stop the run when more than N\n"
	"                           records, or P% of those an epoch (or a validation)\n"
	"                           read, are skipped (default 1%)\n"
	"      --scale X            multiply inputs by X (0.5, 1/255, 1e-3)\n"
	"      --shuffle-buffer N   shuffle through a buffer of N records (default 10000;\n"
	"                           0: keep the order)\n"
	"      --last-batch keep|drop  a partial last batch is trained on or dropped\n"
	"                           (default keep)\n"
	"      --cache file|memory|none  where a stream read once (stdin, FIFO) is kept\n"
	"                           for later epochs (default file: unlinked, in --cache-dir)\n"
	"      --cache-limit SIZE   most bytes of streams to keep (default 4G)\n"
	"      --cache-dir DIR      directory of the cache file (default $TMPDIR or /tmp)\n"
	"      --prefetch N         batches decoded ahead by a reader thread (default 2;\n"
	"                           0: read in the training thread)\n"
	"\n"
	"Model:\n"
	"      --model SPEC         layers, e.g. conv:32:3,relu,maxpool:2,flatten,dense:10,\n"
	"                           blocks res(ITEMS[|SHORTCUT]):relu, seq(ITEMS), NAME=ITEM\n"
	"                           (dp-train(1), MODELS); resnet18/34/50/101/152 or\n"
	"                           resnet20/32/44/56/110; @FILE: the spec from a file\n"
	"      --classes N|NAMES    outputs of a named model (default 1000; resnet20...: 10),\n"
	"                           or the class names (comma-separated, or @FILE one a\n"
	"                           line, as tfr-cat writes them), kept in the checkpoint\n"
	"      --input-shape SHAPE  C x H x W (1x28x28), H x W, or a length (784)\n"
	"      --loss xent|mse      softmax cross-entropy on classes (default) or mean\n"
	"                           squared error on vectors\n"
	"      --summary            print the layers, shapes and parameters, the memory\n"
	"                           a rank takes, and exit\n"
	"      --recompute[=LIST]   keep only each segment's input and output from the\n"
	"                           forward pass and compute the rest again in the\n"
	"                           backward pass (the same gradients, less memory): every\n"
	"                           innermost block and the runs of layers between, or the\n"
	"                           blocks and runs of layers LIST's patterns name\n"
	"                           (layer3.*,[2-7])\n"
	"\n"
	"Training:\n"
	"      --epochs N           passes over the data (default 1)\n"
	"      --max-steps N        stop after N updates in all (a checkpoint resumes)\n"
	"      --batch-size N       samples per update (default 32)\n"
	"      --optimizer NAME     sgd, adam (default) or adamw\n"
	"      --lr X               learning rate (default 0.001; sgd 0.01)\n"
	"      --momentum M         sgd momentum (default 0)\n"
	"      --nesterov           sgd: Nesterov momentum\n"
	"      --dampening D        sgd: momentum dampening (default 0)\n"
	"      --beta1 B --beta2 B  adam, adamw (default 0.9, 0.999)\n"
	"      --eps E              adam, adamw (default 1e-8)\n"
	"      --weight-decay W     L2 penalty (sgd, adam) or decoupled decay (adamw;\n"
	"                           default 0, adamw 0.01)\n"
	"      --lr-schedule S      constant (default), step:EPOCHS[:GAMMA], cosine[:MIN_LR]\n"
	"      --warmup N           ramp the rate up linearly over the first N updates\n"
	"      --seed N             weights, dropout and shuffle (default 0)\n"
	"      --threads N          math threads (default: the CPUs of the host shared by\n"
	"                           its ranks)\n"
	"      --gpu N              the GPU to use, in a CUDA build (default: the local\n"
	"                           rank modulo the GPUs visible; CUDA_VISIBLE_DEVICES)\n"
	"      --precision fp32|tf32|bf16  matrix products in float32 (default), or on\n"
	"                           tensor cores (CUDA build): float32 weights either way\n"
	"      --deterministic      each convolution's algorithms by a rule, not timed\n"
	"                           (cuDNN's, the CPU's): the same bits every run\n"
	"\n"
	"Checkpoints (safetensors, dp-checkpoint(5)):\n"
	"  -o, --output PATH        the final checkpoint\n"
	"      --checkpoint-every N  also save every N updates, or every N epochs with a\n"
	"                           suffix e (2e)\n"
	"      --checkpoint PATH    where those go (default the -o path); {step} and\n"
	"                           {epoch} are filled in\n"
	"      --resume PATH        continue a run from a checkpoint: weights, optimizer,\n"
	"                           position in the data; settings not given are taken from it\n"
	"      --init PATH          start from a checkpoint's weights (fine-tuning), or\n"
	"                           from a PyTorch state_dict with --model, --input-shape\n"
	"\n"
	"Training control (Keras' callbacks, on a validation metric; see dp-train(1)):\n"
	"      --monitor METRIC     what they watch: val_loss (default), val_accuracy, or\n"
	"                           val_ and any metric of dp-eval (val_f1_macro...)\n"
	"      --monitor-mode auto|min|max  better is lower or higher (default auto: higher\n"
	"                           for accuracy, precision, recall, f1, r2)\n"
	"      --early-stopping LIST  stop when it stops improving: patience=N (default\n"
	"                           0), min_delta=X, baseline=X, start_from_epoch=N; a\n"
	"                           bare N is the patience\n"
	"      --reduce-lr-on-plateau LIST  lower the rate when it stalls: factor=X\n"
	"                           (default 0.1), patience=N (10), cooldown=N (0),\n"
	"                           min_lr=X (0), min_delta=X (1e-4); a bare N: patience\n"
	"      --save-best PATH     the checkpoint of the best epoch so far ({epoch})\n"
	"\n"
	"Fine-tuning (PATTERNS: fnmatch patterns of tensor names or layers, comma-\n"
	"separated: 3, 3.weight, 4*; bias, bn, 1d: every bias, batchnorm, 1-D tensor):\n"
	"      --reset PATTERNS     re-initialise those tensors after --init\n"
	"      --freeze PATTERNS    keep those parameters fixed\n"
	"      --lr-mult 'PAT=X,...'  their learning rate times X (the first match)\n"
	"      --no-decay PATTERNS  no weight decay for those (e.g. bias,bn)\n"
	"      --label-smoothing X  cross-entropy against (1-X) one-hot + X/classes\n"
	"      --sync-bn            batchnorm statistics over the batch of all ranks\n"
	"\n"
	"Logs:\n"
	"      --log-format logfmt|json  training log lines (default logfmt)\n"
	"      --log FILE           write the log there (default stdout)\n"
	"      --log-every N        a training line every N updates (default 100)\n"
	"      --progress, --no-progress  a progress bar on stderr (default: when a terminal)\n"
	"  -q, --quiet              no progress bar, no notes on stderr\n"
	"      --tensorboard DIR    also write TensorBoard event files as Keras does: the\n"
	"                           log's values and the run's settings (hparams) in\n"
	"                           DIR/events.out.tfevents.TIME.HOST, epoch_loss...\n"
	"                           in DIR/train/ and DIR/validation/ (new files each run)\n"
	"      --tensorboard-histograms  and weight and gradient histograms each epoch\n"
	"      --on-epoch CMD       run CMD (sh -c) after each epoch's checkpoint and events,\n"
	"                           and wait for it; {epoch}, {checkpoint}, {tensorboard}\n"
	"                           are filled in shell-quoted (also $DP_EPOCH,\n"
	"                           $DP_CHECKPOINT, $DP_TENSORBOARD); a failure is reported\n"
	"      --on-epoch-fail      a failing --on-epoch command ends the run (exit 1)\n"
	"\n"
	"Data parallelism (under mpirun; see DISTRIBUTED in dp-train(1)):\n"
	"      --shard-data         every rank takes a disjoint share of the training and\n"
	"                           validation records (default: when the paths or the\n"
	"                           command name no {rank})\n"
	"      --no-shard-data      every rank reads all its sources give\n"
	"      --uneven join|drop   when ranks' data runs out at different steps: train on\n"
	"                           until every rank is done (default), or end the epoch\n"
	"                           when the first is\n"
	"      --scale-lr           multiply --lr by the number of ranks\n"
	"      --warmup-epochs E    with --scale-lr: ramp the rate from --lr up over the\n"
	"                           first E epochs\n"
	"      --steps-per-epoch N  the updates an epoch holds, for --warmup-epochs'\n"
	"                           ramp (default: counted from the files; needed with\n"
	"                           --train-cmd, whose epoch can be read only once)\n"
	"      --accumulate N       N micro-batches of --batch-size an update, their\n"
	"                           gradients summed before one allreduce (default 1)\n"
	"      --clip-norm X        scale the summed gradients down to an L2 norm of at\n"
	"                           most X (PyTorch's clip_grad_norm_)\n"
	"      --pipeline-stages S  cut the model into S stages of about equal cost, each\n"
	"                           on ranks of its own: mpirun -np S x D runs D replicas\n"
	"                           of the pipeline (rank r: stage r mod S, replica r/S)\n"
	"      --micro-batches M    with --pipeline-stages: each replica's step of\n"
	"                           --batch-size samples in M micro-batches through the\n"
	"                           stages (default: 4 x S, at most the batch)\n"
	"      --pipeline-schedule 1f1b|gpipe  the stages' order of forward and backward\n"
	"                           passes (default 1f1b: fewer activations kept)\n"
	"      --memory-limit SIZE  refuse to train when a rank's model (weights,\n"
	"                           gradients, optimizer state, activations) takes more\n"
	"                           (a smaller device emulated; k, M, G)\n"
	"      --no-overlap         reduce the gradients after the backward pass, in one\n"
	"                           call, not in buckets during it\n"
	"      --bucket-size SIZE   gradient bytes per allreduce while overlapping\n"
	"                           (default 1M)\n"
	"      --grad-dtype T       gradients on the wire: fp32 (default), bf16 or fp16\n"
	"                           (half the bytes; summed in fp32, the same on every rank)\n"
	"      --allreduce A        ring (default), hierarchical (within each host first,\n"
	"                           then a ring of one rank per host) or mpi (the MPI\n"
	"                           library's collectives)\n"
	"      --log-all-ranks      every rank also logs its own lines, with rank=R\n"
	"      --timeline FILE      a Chrome trace (chrome://tracing, Perfetto) of compute,\n"
	"                           allreduce and waits per rank; {rank}: a file each\n"
	"      --stall-timeout S    report ranks that keep the others waiting S seconds\n"
	"                           (default 60; 0: never)\n"
	"      --stall-abort S      end the job after waiting S seconds (default: never)\n"
	"\n"
	"      --sagemaker[=ROOT]   run as a SageMaker training job: options from the\n"
	"                           hyperparameters, records from the channels, the model\n"
	"                           to ROOT/model, a failure's reason to ROOT/output/failure\n"
	"                           (ROOT: /opt/ml; see SAGEMAKER in dp-train(1)); so does\n"
	"                           the lone argument train\n"
	"      --help               this list\n"
	"      --version            the version\n"
	"\n"
	"Exit status: 0 done, 1 failure, 2 usage error, 3 training diverged (loss not finite).\n";

static void help(void) { fputs(help_text, stdout); }

/* ---- messages ---------------------------------------------------------------
 *
 * In a job of several ranks: notes come from rank 0 alone; a failure of
 * one rank is printed by that rank, "dp-train: rank 2: ..." (cli.rank),
 * and ends the whole job (dp_comm_abort, cli.on_fail), since the others
 * would wait for it forever; a failure every rank meets alike (a usage
 * error, a bad checkpoint: die_all) is printed once, by rank 0.  Before
 * the job is joined, rank and size come from the launcher's environment. */

static dp_comm *COMM; /* the job, once joined */
static int RANK, SIZE = 1;
/* The data-parallel replicas, this rank's among them: the ranks and this
 * one without --pipeline-stages; with it, rank r is stage r % S of
 * replica r / S, and only the first stages read training data. */
static int REPS = 1, REP;

/* Who we are in the job: the rank's messages say so (cli_set_rank). */
static void set_rank(int rank, int size)
{
	RANK = rank;
	SIZE = size;
	REPS = O.stages > 1 && size % O.stages == 0 ? size / O.stages : size;
	REP = O.stages > 1 ? rank / O.stages : rank;
	cli_set_rank(rank, size);
}

/* The job's failures, said once (cli_job_says). */
#define die_all(code, ...)                       \
	do {                                     \
		cli_job_says();                  \
		cli_die_code(code, __VA_ARGS__); \
	} while (0)

/* cli.before_msg */
static void before_msg(void)
{
	cli_progress_clear();
	fflush(stdout);
}

/* cli.on_fail: a failure ends every rank of the job.  A failure every
 * rank meets alike (cli.quiet here: rank 0 says it) is ended by rank 0,
 * so that its message is out before the abort kills the job: the others
 * wait for that (at most 30 s, then end the job themselves). */
static void end_job(int code)
{
	dp_out_cleanup();
	if (COMM && SIZE > 1) {
		for (int i = 0; cli.quiet && RANK != 0 && i < 300; i++) {
			struct timespec ts = {0, 100000000};
			nanosleep(&ts, NULL);
		}
		/* the message is in the pipe to mpirun's daemon; the abort kills
		 * the job at once, and under load mpirun then sometimes drops
		 * what it had not forwarded yet: give it a moment */
		struct timespec ts = {1, 0};
		fflush(stderr);
		nanosleep(&ts, NULL);
		dp_comm_abort(COMM, code);
	}
}

/* A note of the job (rank 0's), unless --quiet. */
static void __attribute__((format(printf, 1, 2))) note(const char *fmt, ...)
{
	if (O.quiet || RANK != 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	cli_job_says();
	cli_vwarn(fmt, ap);
	cli_set_rank(RANK, SIZE);
	va_end(ap);
}

/* --checkpoint-every N (updates) or Ne (epochs). */
static void parse_ckpt_every(const char *arg)
{
	size_t l = strlen(arg);
	char buf[32];
	dp_err e;
	O.ckpt_epochs = l > 1 && l < sizeof buf && arg[l - 1] == 'e';
	snprintf(buf, sizeof buf, "%.*s", (int)(l - (size_t)O.ckpt_epochs), arg);
	if (dp_parse_count("--checkpoint-every", buf, 1, UINT64_MAX / 2, &O.ckpt_every, &e) < 0)
		/* the value as given, its e included */
		cli_job_usage_error("--checkpoint-every '%s': want N updates or Ne epochs, N a whole number "
			    "from 1",
			    arg);
}

/* --on-epoch CMD: its placeholders known. */
static void parse_on_epoch(const char *arg)
{
	dp_err e;
	const char *vars[] = {"epoch", "1", "checkpoint", "", "tensorboard", "", NULL};
	char *x = dp_expand_strict(arg, vars, &e);
	if (!x)
		cli_job_usage_error("--on-epoch: %s", e.msg);
	free(x);
	O.on_epoch = arg;
}

/* The options of the input pipeline (c, getopt_long's, with longopts[li]
 * its entry): 1 when c is one of them (those dp-eval shares:
 * cli_input_option). */
static int data_option(int c, const char *arg, int li)
{
	switch (c) {
	case O_TRAIN: cli_push(&O.train, &O.ntrain, arg); break;
	case O_TRAIN_CMD: O.train_cmd = arg; break;
	case O_VAL: cli_push(&O.val, &O.nval, arg); break;
	case O_VAL_CMD: O.val_cmd = arg; break;
	case O_SHUFFLE: C.shuffle = cli_count("--shuffle-buffer", arg, 0, 1u << 28); break;
	case O_LAST_BATCH:
		if (strcmp(arg, "keep") && strcmp(arg, "drop"))
			cli_job_usage_error("--last-batch '%s': want keep or drop", arg);
		C.drop_last = !strcmp(arg, "drop");
		break;
	case O_CACHE:
		O.cache = !strcmp(arg, "file")     ? DP_CACHE_FILE
			  : !strcmp(arg, "memory") ? DP_CACHE_MEMORY
			  : !strcmp(arg, "none")   ? DP_CACHE_NONE
						      : -1;
		if (O.cache < 0)
			cli_job_usage_error("--cache '%s': want file, memory or none", arg);
		break;
	case O_CACHE_LIMIT:
		if (dp_parse_size(arg, &O.cache_limit) < 0)
			cli_job_usage_error("--cache-limit '%s': want a size such as 512M or 8G", arg);
		if (!O.cache_limit)
			cli_job_usage_error("--cache-limit '%s': want more than 0 bytes (--cache none "
				    "keeps nothing)",
				    arg);
		break;
	case O_CACHE_DIR: O.cache_dir = arg; break;
	case O_PREFETCH: O.prefetch = (int)cli_count("--prefetch", arg, 0, 64); break;
	default: return cli_input_option(&O.in, c, longopts[li].name, arg);
	}
	return 1;
}

/* The input's options that are the run's settings, into C: those not
 * given keep dp_run_conf_init's (or a checkpoint's, settings_from). */
static void input_options(void)
{
	if (O.in.feature)
		C.feature = O.in.feature;
	if (O.in.label)
		C.label = O.in.label;
	if (O.in.decode >= 0)
		C.decode = O.in.decode;
	if (O.in.scale_text)
		C.scale = O.in.scale, C.scale_text = O.in.scale_text;
	if (O.in.hwc >= 0)
		C.hwc = O.in.hwc;
	C.img = O.in.img;
}

/* --monitor, --monitor-mode, --early-stopping, --reduce-lr-on-plateau:
 * kept as given (the checkpoint's keys), checked now. */
static void control_option(int c, const char *arg)
{
	dp_control_conf t;
	dp_err e;
	dp_control_init(&t);
	int rc = c == O_MONITOR	       ? dp_control_monitor(&t, arg, NULL, &e)
		 : c == O_MONITOR_MODE ? dp_control_monitor(&t, NULL, arg, &e)
		 : c == O_EARLY_STOP   ? dp_control_early_stop(&t, arg, &e)
				       : dp_control_plateau(&t, arg, &e);
	if (rc < 0)
		cli_job_usage_error("--%s: %s", c == O_MONITOR ? "monitor" : c == O_MONITOR_MODE ? "monitor-mode"
					 : c == O_EARLY_STOP			      ? "early-stopping"
										      : "reduce-lr-on-plateau",
			    e.msg);
	*(c == O_MONITOR	? &C.monitor
	  : c == O_MONITOR_MODE ? &C.monitor_mode
	  : c == O_EARLY_STOP	? &C.early_stop
				: &C.plateau) = arg;
}

/* The options of the data-parallel job: 1 when c is one of them. */
static int dist_option(int c, const char *arg)
{
	switch (c) {
	case O_SHARD_DATA: O.shard = 1; break;
	case O_NO_SHARD_DATA: O.shard = 0; break;
	case O_UNEVEN:
		if (strcmp(arg, "join") && strcmp(arg, "drop"))
			cli_job_usage_error("--uneven '%s': want join or drop", arg);
		O.uneven_drop = !strcmp(arg, "drop");
		break;
	case O_SCALE_LR: C.scale_lr = 1; break;
	case O_WARMUP_EPOCHS: C.warmup_epochs = cli_real("--warmup-epochs", arg, 0, 1e6); break;
	case O_STEPS_PER_EPOCH:
		C.steps_per_epoch = cli_count("--steps-per-epoch", arg, 1, UINT64_MAX / 4);
		break;
	case O_NO_OVERLAP: O.overlap = 0; break;
	case O_ACCUMULATE: C.accumulate = cli_count("--accumulate", arg, 1, 1u << 16); break;
	case O_CLIP_NORM: C.clip_norm = cli_real("--clip-norm", arg, 1e-30, 1e30); break;
	case O_BUCKET:
		O.bucket = cli_size("--bucket-size", arg, 1, 1ull << 40);
		break;
	case O_GRAD_DTYPE:
		if ((O.wire = dp_comm_wire_parse(arg)) < 0)
			cli_job_usage_error("--grad-dtype '%s': want fp32, bf16 or fp16", arg);
		break;
	case O_ALLREDUCE:
		if ((O.algo = dp_comm_algo_parse(arg)) < 0)
			cli_job_usage_error("--allreduce '%s': want ring, hierarchical or mpi", arg);
		break;
	case O_LOG_ALL: O.log_all = 1; break;
	case O_TIMELINE: O.timeline = arg; break;
	case O_STALL: O.stall = cli_real("--stall-timeout", arg, 0, 1e7); break;
	case O_STALL_ABORT: O.stall_abort = cli_real("--stall-abort", arg, 0, 1e7); break;
	default: return 0;
	}
	return 1;
}

/* The optimizer's options as given, applied once all are read (the kind
 * brings its defaults: optim_done). */
static struct {
	double momentum, dampening, beta1, beta2, eps, wd; /* wd < 0: the kind's default */
	int nesterov;
	const char *name;
} OPTS = {0, 0, 0.9, 0.999, 1e-8, -1, 0, "adam"};

/* The options of the optimizer and its schedule: 1 when c is one of them. */
static int optim_option(int c, const char *arg)
{
	switch (c) {
	case O_OPTIMIZER:
		if (!dp_optim_parse(arg))
			cli_job_usage_error("--optimizer '%s': want sgd, adam or adamw", arg);
		OPTS.name = arg;
		break;
	case O_LR: C.lr = cli_real("--lr", arg, 0, 1e6); break;
	case O_MOMENTUM: OPTS.momentum = cli_real("--momentum", arg, 0, 0.999999); break;
	case O_NESTEROV: OPTS.nesterov = 1; break;
	case O_DAMPENING: OPTS.dampening = cli_real("--dampening", arg, 0, 1); break;
	case O_BETA1: OPTS.beta1 = cli_real("--beta1", arg, 0, 0.999999); break;
	case O_BETA2: OPTS.beta2 = cli_real("--beta2", arg, 0, 0.999999); break;
	case O_EPS: OPTS.eps = cli_real("--eps", arg, 0, 1); break;
	case O_WD: OPTS.wd = cli_real("--weight-decay", arg, 0, 1e6); break;
	case O_SCHEDULE: C.schedule = arg; break;
	case O_WARMUP: C.warmup = cli_count("--warmup", arg, 0, UINT64_MAX / 2); break;
	default: return 0;
	}
	return 1;
}

/* The optimizer's settings: its kind's defaults, then the options given. */
static void optim_done(void)
{
	dp_optim_defaults(&C.opt, dp_optim_parse(OPTS.name));
	C.opt.momentum = OPTS.momentum;
	C.opt.dampening = OPTS.dampening;
	C.opt.nesterov = OPTS.nesterov;
	C.opt.beta1 = OPTS.beta1;
	C.opt.beta2 = OPTS.beta2;
	C.opt.eps = OPTS.eps;
	if (OPTS.wd >= 0)
		C.opt.weight_decay = OPTS.wd;
	if (!O.given[O_LR])
		C.lr = C.opt.kind == DP_OPTIM_SGD ? 0.01 : 0.001;
}

static void parse_args(int argc, char **argv)
{
	int c;
	dp_optim_defaults(&C.opt, DP_OPTIM_ADAM);
	cli_job_says(); /* what goes wrong here goes wrong on every rank */
	cli_input_init(&O.in);
	O.in.img = C.img; /* the image options over the run's defaults */
	opterr = 0;
	int li = 0;
	while ((c = getopt_long(argc, argv, ":o:q", longopts, &li)) != -1) {
		if (c >= 0 && c < O_LAST)
			O.given[c] = 1;
		switch (c) {
		case O_MODEL: C.model = optarg; break;
		case O_CLASSES: classes_opt(optarg); break;
		case O_SYNC_BN: C.sync_bn = 1; break;
		case O_INPUT_SHAPE: C.input_shape = optarg; break;
		case O_LOSS:
			if (!(C.loss = dp_loss_parse(optarg)))
				cli_job_usage_error("--loss '%s': want xent or mse", optarg);
			break;
		case O_SUMMARY: O.summary = 1; break;
		case O_RECOMPUTE: O.recompute = optarg ? optarg : ""; break;
		case O_PIPE_STAGES:
			O.stages = (int)cli_count("--pipeline-stages", optarg, 1, DP_MAX_STAGES);
			break;
		case O_MICRO: O.micro = cli_count("--micro-batches", optarg, 1, 1u << 20); break;
		case O_PIPE_SCHED:
			if ((O.psched = dp_pipe_schedule_parse(optarg)) < 0)
				cli_job_usage_error("--pipeline-schedule '%s': want 1f1b or gpipe", optarg);
			break;
		case O_MEMORY_LIMIT:
			if (dp_parse_size(optarg, &O.mem_limit) < 0 || !O.mem_limit)
				cli_job_usage_error("--memory-limit '%s': want a size such as 512M or 8G", optarg);
			break;
		case O_EPOCHS: C.epochs = cli_count("--epochs", optarg, 1, 1u << 30); break;
		case O_MAX_STEPS: O.max_steps = cli_count("--max-steps", optarg, 1, UINT64_MAX / 2); break;
		case O_BATCH: C.batch = cli_count("--batch-size", optarg, 1, 1u << 20); break;
		case O_SEED: C.seed = cli_count("--seed", optarg, 0, UINT64_MAX); break;
		case O_THREADS: O.threads = (int)cli_count("--threads", optarg, 1, 256); break;
		case O_GPU: O.gpu = (int)cli_count("--gpu", optarg, 0, 4096); break;
		case O_DETERMINISTIC: O.deterministic = 1; break;
		case O_PRECISION:
			if ((C.precision = dp_precision_parse(optarg)) < 0)
				cli_job_usage_error("--precision '%s': want fp32, tf32 or bf16", optarg);
			break;
		case O_CKPT_EVERY: parse_ckpt_every(optarg); break;
		case O_CKPT: O.ckpt = optarg; break;
		case O_RESUME: O.resume = optarg; break;
		case O_INIT: O.init = optarg; break;
		case O_RESET: O.reset = optarg; break;
		case O_FREEZE: C.freeze = optarg; break;
		case O_LR_MULT: C.lr_mult = optarg; break;
		case O_NO_DECAY: C.no_decay = optarg; break;
		case O_SMOOTH: C.smooth = cli_real("--label-smoothing", optarg, 0, 1); break;
		case 'o': O.output = optarg; break;
		case O_LOG_FORMAT:
			if (strcmp(optarg, "logfmt") && strcmp(optarg, "json"))
				cli_job_usage_error("--log-format '%s': want logfmt or json", optarg);
			O.json = !strcmp(optarg, "json");
			break;
		case O_LOG: O.log = optarg; break;
		case O_LOG_EVERY: O.log_every = cli_count("--log-every", optarg, 1, UINT64_MAX / 2); break;
		case O_PROGRESS: O.progress = 1; break;
		case O_NO_PROGRESS: O.progress = 0; break;
		case 'q': O.quiet = 1; break;
		case O_TENSORBOARD: O.tensorboard = optarg; break;
		case O_TB_HIST: O.tb_hist = 1; break;
		case O_ON_EPOCH: parse_on_epoch(optarg); break;
		case O_ON_EPOCH_FAIL: O.on_epoch_fail = 1; break;
		case O_MONITOR:
		case O_MONITOR_MODE:
		case O_EARLY_STOP:
		case O_PLATEAU: control_option(c, optarg); break;
		case O_SAVE_BEST: O.save_best = optarg; break;
		case 'h': cli_help(help); /* once per job under mpirun */
		case 'V': cli_version();
		default:
			if (!data_option(c, optarg, li) && !dist_option(c, optarg) &&
			    !optim_option(c, optarg))
				cli_bad_option(c, argv);
		}
	}
	if (optind < argc)
		cli_job_usage_error("unexpected argument '%s' (records are given with --train)", argv[optind]);
	if (O.tb_hist && !O.tensorboard)
		cli_job_usage_error("--tensorboard-histograms goes with --tensorboard DIR");
	if (O.on_epoch_fail && !O.on_epoch)
		cli_job_usage_error("--on-epoch-fail goes with --on-epoch CMD");
	optim_done();
	input_options();
	if (C.decode == DP_DECODE_IMAGE && !O.in.feature) /* tfrecord(5)'s names */
		C.feature = "image/encoded";
	if (C.decode == DP_DECODE_IMAGE && !O.in.label)
		C.label = "image/class/label";
	cli_set_rank(RANK, SIZE);
}
/* ---- settings from a checkpoint when resuming ------------------------------ */

/* The options that set a key of the run's settings (dp_run_conf): given
 * on the command line, the key is not taken from a checkpoint. */
static const struct {
	int opt, key;
} opt_keys[] = {
	{O_MODEL, DP_RUN_MODEL}, {O_INPUT_SHAPE, DP_RUN_INPUT_SHAPE}, {O_LOSS, DP_RUN_LOSS},
	{O_SHUFFLE, DP_RUN_SHUFFLE}, {O_LAST_BATCH, DP_RUN_LAST_BATCH}, {O_BATCH, DP_RUN_BATCH},
	{O_ACCUMULATE, DP_RUN_ACCUMULATE}, {O_CLIP_NORM, DP_RUN_CLIP_NORM},
	{O_EPOCHS, DP_RUN_EPOCHS}, {O_SEED, DP_RUN_SEED}, {O_SCHEDULE, DP_RUN_SCHEDULE},
	{O_WARMUP, DP_RUN_WARMUP}, {O_OPTIMIZER, DP_RUN_OPTIMIZER}, {O_LR, DP_RUN_LR},
	{O_MOMENTUM, DP_RUN_MOMENTUM}, {O_DAMPENING, DP_RUN_DAMPENING}, {O_BETA1, DP_RUN_BETA1},
	{O_BETA2, DP_RUN_BETA2}, {O_EPS, DP_RUN_EPS}, {O_WD, DP_RUN_WD},
	{O_NESTEROV, DP_RUN_NESTEROV}, {O_SCALE_LR, DP_RUN_SCALE_LR},
	{O_WARMUP_EPOCHS, DP_RUN_WARMUP_EPOCHS}, {O_STEPS_PER_EPOCH, DP_RUN_STEPS_PER_EPOCH},
	{O_FREEZE, DP_RUN_FREEZE},
	{O_LR_MULT, DP_RUN_LR_MULT}, {O_NO_DECAY, DP_RUN_NO_DECAY}, {O_SMOOTH, DP_RUN_SMOOTH},
	{O_SYNC_BN, DP_RUN_SYNC_BN}, {O_MONITOR, DP_RUN_MONITOR}, {O_MONITOR_MODE, DP_RUN_MONITOR_MODE},
	{O_EARLY_STOP, DP_RUN_EARLY_STOP}, {O_PLATEAU, DP_RUN_PLATEAU},
};

/* Take keys (a list ending in -1; NULL: all) from checkpoint ck where the
 * command line did not give them, so that `--resume ck` alone continues
 * the same run. */
static void settings_from(const dp_st *ck, const int *keys)
{
	dp_err e;
	for (size_t i = 0; i < sizeof opt_keys / sizeof opt_keys[0]; i++)
		C.given[opt_keys[i].key] = O.given[opt_keys[i].opt];
	C.given[DP_RUN_FEATURE] = O.in.feature != NULL;
	C.given[DP_RUN_LABEL] = O.in.label != NULL;
	C.given[DP_RUN_DECODE] = O.in.decode >= 0;
	C.given[DP_RUN_IMAGE] = O.in.img_text != NULL;
	C.given[DP_RUN_LAYOUT] = O.in.hwc >= 0;
	C.given[DP_RUN_SCALE] = O.in.scale_text != NULL;
	if (dp_run_conf_from(&C, ck, keys, &e) < 0)
		die_all(1, "%s", e.msg);
}

/* A setting that does not hold: a usage error when the command line gave
 * it; when it came from the checkpoint's metadata (meta), a bad
 * checkpoint, named, exit 1. */
static void __attribute__((noreturn, format(printf, 2, 3))) bad_setting(int meta, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (meta && C.src)
		die_all(1, "%s: metadata: %s", C.src, msg);
	cli_job_usage_error("%s", msg);
}

/* ---- TensorBoard (rank 0) ------------------------------------------------------ */

static dp_tb_run *TB;       /* --tensorboard's run folder (Keras's layout) */
static char **tb_argv;     /* the command line, for its settings */
static int tb_argc;

/* The run folder, its settings first: the hparams and the command line. */
static void tb_open(void)
{
	dp_err e;
	if (!O.tensorboard || RANK != 0)
		return;
	C.ranks = SIZE;
	if (!(TB = dp_train_tb_open(O.tensorboard, DP_PROG, tb_argc, tb_argv, &C, &e)))
		cli_die("--tensorboard: %s", e.msg);
}

/* The numbers of a job's log line as one event at its step. */
static void tb_line(const char *const *keys, const char *const *vals, int n)
{
	dp_err e;
	if (TB && dp_train_tb_line(TB, keys, vals, n, &e) < 0)
		cli_die("--tensorboard: %s", e.msg);
}

static void tb_close(void)
{
	dp_err e;
	if (dp_tb_run_close(TB, &e) < 0)
		cli_die("--tensorboard: %s", e.msg);
	TB = NULL;
}

/* ---- logs ---------------------------------------------------------------------- */

static FILE *logfp;

static void log_flush(void)
{
	if (fflush(logfp) != 0 || ferror(logfp))
		cli_die("%s: write error: %s", O.log ? O.log : "stdout", strerror(errno));
}

/* A log line: pairs of key and printf-formatted value; logfmt or JSON.
 * Rank 0 writes the job's lines; with --log-all-ranks every rank also
 * writes its own, which begin with rank=R.  Ranks without a log skip. */
static void log_line(const char *const *keys, const char *const *vals, int n, int own)
{
	if (!logfp || (own && !(O.log_all && SIZE > 1)) || (!own && RANK != 0))
		return;
	cli_progress_clear();
	if (O.json)
		fputc('{', logfp);
	if (own)
		fprintf(logfp, O.json ? "\"rank\":%d%s" : "rank=%d%s", RANK, n ? (O.json ? "," : " ") : "");
	for (int i = 0; i < n; i++) {
		if (O.json)
			fprintf(logfp, "%s\"%s\":%s", i ? "," : "", keys[i], vals[i]);
		else
			fprintf(logfp, "%s%s=%s", i ? " " : "", keys[i], vals[i]);
	}
	fputs(O.json ? "}\n" : "\n", logfp);
	log_flush();
	if (!own)
		tb_line(keys, vals, n);
}

static dp_data *TD, *VD; /* training, validation */
/* Where this rank's training data is: the pos of its last batch trained
 * on (dp_batch), saved in checkpoints as epoch_records (every rank's);
 * and, resuming, where to start (0: count batches, an older checkpoint or
 * another number of ranks). */
static uint64_t data_pos, resume_pos;

typedef struct meter {
	double loss, correct;
	uint64_t samples, steps;
	double t0;
} meter;

static meter tb_ep; /* --tensorboard: the job's training sums of the epoch so far */

static void train_line(uint64_t epoch, uint64_t step, double loss, double correct, double samples,
		       double skipped, double dt, double lr, int has_acc, int own)
{
	char v[7][40];
	const char *keys[7] = {"epoch", "step", "loss", "accuracy", "lr", "samples_per_sec", "skipped"};
	const char *vals[7] = {v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
	snprintf(v[0], 40, "%" PRIu64, epoch + 1);
	snprintf(v[1], 40, "%" PRIu64, step);
	snprintf(v[2], 40, "%.6g", samples > 0 ? loss / samples : 0.0);
	snprintf(v[3], 40, "%.4f", samples > 0 ? correct / samples : 0.0);
	/* 12 significant digits: a schedule's arithmetic leaves noise in the
	 * last bits (cosine: 0.005000000000000003), not a rate anyone set */
	snprintf(v[4], 40, "%.12g", lr);
	snprintf(v[5], 40, "%.0f", dt > 0 ? samples / dt : 0.0);
	snprintf(v[6], 40, "%.0f", skipped);
	if (!has_acc) { /* mse: no accuracy */
		keys[3] = keys[4], keys[4] = keys[5], keys[5] = keys[6];
		vals[3] = vals[4], vals[4] = vals[5], vals[5] = vals[6];
	}
	/* skipped: the images skipped as corrupt this epoch so far (the
	 * input's count, which may run a few batches ahead of the steps) */
	log_line(keys, vals, (has_acc ? 6 : 5) + O.in.skip_corrupt, own);
}

/* The training line of the last steps: this rank's (--log-all-ranks),
 * then the job's, summed over the ranks (a collective: every rank calls
 * it at the same steps). */
static void log_train(uint64_t epoch, uint64_t step, meter *mt, double lr, int has_acc)
{
	double t = dp_now(), dt = t - mt->t0;
	dp_data_stats ds = {0};
	if (TD)
		dp_data_stats_get(TD, &ds);
	double v[4] = {mt->loss, mt->correct, (double)mt->samples, (double)ds.corrupt};
	train_line(epoch, step, v[0], v[1], v[2], v[3], dt, lr, has_acc, 1);
	dp_err e;
	if (dp_comm_allreduce_sum(COMM, v, 4, &e) < 0)
		cli_die("log: %s", e.msg);
	dp_comm_event(COMM, "metrics", 1, t, dp_now());
	train_line(epoch, step, v[0], v[1], v[2], v[3], dt, lr, has_acc, 0);
	tb_ep.loss += v[0];
	tb_ep.correct += v[1];
	tb_ep.samples += (uint64_t)v[2];
	memset(mt, 0, sizeof *mt);
	mt->t0 = dp_now();
}

static void bar_draw(uint64_t epoch, uint64_t done, uint64_t total, const meter *mt)
{
	if (!cli_progress_due())
		return;
	double now = dp_now();
	char line[160];
	int n = snprintf(line, sizeof line, "epoch %" PRIu64 "/%" PRIu64 " ", epoch + 1, C.epochs);
	if (total) {
		int w = 30, fill = (int)(w * (double)done / (double)total);
		if (fill > w)
			fill = w;
		n += snprintf(line + n, sizeof line - (size_t)n, "[%.*s%*s] ", fill,
			      "##############################", w - fill, "");
		n += snprintf(line + n, sizeof line - (size_t)n, "%" PRIu64 "/%" PRIu64, done, total);
	} else {
		n += snprintf(line + n, sizeof line - (size_t)n, "step %" PRIu64, done);
	}
	if (mt->samples)
		snprintf(line + n, sizeof line - (size_t)n, "  loss %.4f  %.0f samples/s",
			 mt->loss / (double)mt->samples,
			 (double)mt->samples / fmax(1e-9, now - mt->t0));
	cli_progress("%s", line);
}

/* ---- checkpoints ---------------------------------------------------------------- */

/* The run's objects, global so that they stay reachable when a message
 * ends the program (exit does not free them; leak checkers should not
 * count them). */
static dp_model *M;
static dp_optim *OPT;
static dp_trainer *TR; /* the step (dp_train.h) */
/* Training control (dp_train.h): early stopping, the rate on a plateau,
 * the best epoch; on when ctl_on. */
static dp_control_conf CTL;
static dp_control_state CS;
static int ctl_on, ctl_stopped;
static const char *last_ckpt;
static uint64_t last_ckpt_step;
static int have_ckpt;

/* Every rank's running statistics (batchnorm) become their mean: each
 * rank's were updated from its own batches. */
static void average_buffers(void)
{
	dp_err e;
	if (dp_trainer_average_buffers(TR, &e) < 0)
		cli_die("batchnorm statistics: %s", e.msg);
}

/* The class names the training records gave (image/class/text), once
 * every class was met under one name: into the checkpoints from then on. */
static void records_classes(void)
{
	char *json = C.classes ? NULL : dp_run_data_classes(TD);
	if (json)
		C.classes = json;
}

static char *conv_algos_text(void); /* the convolution algorithms, or NULL */

/* A checkpoint: called by every rank at the same step; rank 0 writes. */
static void save(const char *tmpl, const dp_train_state *ts)
{
	average_buffers();
	char producer[64], sb[24], eb[24];
	snprintf(producer, sizeof producer, "dp-train %s", dp_version());
	snprintf(sb, sizeof sb, "%" PRIu64, ts->step);
	snprintf(eb, sizeof eb, "%" PRIu64, ts->epoch);
	const char *vars[] = {"step", sb, "epoch", eb, NULL};
	char *path = dp_expand(tmpl, vars);
	if (!path)
		cli_die("out of memory");
	dp_err e;
	/* every rank's position in the epoch: a batch with a skipped image
	 * took more records than its size, so batches do not tell it */
	char *posb = dp_trainer_epoch_records(TR, COMM, data_pos, ts->epoch_step != 0, &e);
	if (!posb)
		cli_die("checkpoint: %s", e.msg);
	char *algos = conv_algos_text();
	char *cst = ctl_on ? dp_control_state_format(&CS, &e) : NULL;
	if (ctl_on && !cst)
		cli_die_err(CLI_FAIL, &e);
	C.control_state = cst ? cst : "";
	const char *extra[] = {"epoch_records", posb, "producer", producer,
			       algos && *algos ? "conv_algos" : NULL, algos, NULL};
	C.ranks = REPS;
	records_classes();
	char **meta = dp_run_conf_meta(&C, extra, &e);
	if (!meta)
		cli_die_err(CLI_FAIL, &e);
	if (dp_trainer_save(TR, path, ts, (const char *const *)meta, &e) < 0) {
		if (e.code == DP_EDATA)
			cli_die_code(TRAIN_DIVERGED, "step %" PRIu64 ": %s%s%s", ts->step, e.msg,
				 have_ckpt ? "; the last good checkpoint is " : "",
				 have_ckpt ? last_ckpt : "");
		cli_die_err(CLI_FAIL, &e);
	}
	free((char *)last_ckpt);
	last_ckpt = path;
	last_ckpt_step = ts->step;
	have_ckpt = 1;
	free(posb);
	free(meta);
	free(algos);
	free(cst);
	C.control_state = NULL;
}

/* ---- the run ------------------------------------------------------------------------ */

/* What set-up makes and the epochs use (the model, optimizer and data are
 * M, OPT, TD and VD above). */
static struct {
	const dp_backend *be;
	dp_bectx *ctx;
	char desc[256];           /* the backend, for the first note */
	int cpus, local;          /* --threads by default: dp_default_threads's */
	dp_st *ck;                /* the checkpoint resumed or started from, during set-up */
	dp_shape in;              /* --input-shape */
	int xent;                 /* classes (else mse) */
	dp_sched sched;           /* the learning rate ... */
	uint64_t ramp;            /* ... and the updates of --warmup-epochs' ramp (0: none) */
	const char *ckpt_path;    /* where --checkpoint-every saves */
	dp_train_state ts;        /* where the run is */
	uint64_t steps_per_epoch; /* known after an epoch (the progress bar) */
	meter mt;                 /* the sums of the next training line */
	double lr;                /* of the last update */
	double iter_time;         /* seconds of the steps, ... */
	uint64_t iters;           /* ... and their number */
	dp_eval *val;             /* validation metrics (with VD) */
} R;

/* ---- the run in words (dp_train.h: lib/train/summary.c) --------------------------- */

/* A text of the run in words (dp_train.h), printed on stdout or as a
 * note. */
static void print_text(char *t)
{
	if (!t)
		cli_die("out of memory");
	fputs(t, stdout);
	free(t);
}

static void note_text(char *t)
{
	if (!t)
		cli_die("out of memory");
	note("%s", t);
	free(t);
}

/* --memory-limit: this rank's model (bound) and optimizer within it, or
 * the run ends, on this rank, saying what would cut it. */
static void memory_check(void)
{
	dp_err e;
	if (dp_train_memory_check(M, OPT, O.mem_limit, &e) < 0)
		cli_die("%s", e.msg);
}

/* ---- the data ------------------------------------------------------------------------ */

/* Whether a path template names {rank} (or {rank:W}): a file a rank. */
static int names_rank(const char *tmpl)
{
	return strstr(tmpl, "{rank}") || strstr(tmpl, "{rank:");
}

/* Sources that name {rank} (or {rank:5}) give each rank its own records. */
static int per_rank(const char *const *paths, size_t n, const char *cmd)
{
	if (cmd)
		return strstr(cmd, "{rank") != NULL;
	for (size_t i = 0; i < n; i++)
		if (strstr(paths[i], "{rank"))
			return 1;
	return 0;
}

/* Whether the ranks split the records of these sources between them. */
static int shared(const char *const *paths, size_t n, const char *cmd)
{
	return REPS > 1 && (O.shard >= 0 ? O.shard : !per_rank(paths, n, cmd));
}

/* A skipped image (--skip-corrupt), from a reader thread. */
static void skip_warn(void *ctx, const dp_err *e)
{
	cli_warn("%s; skipped", e->msg);
}

/* The training (train) or validation data: the run's settings
 * (dp_run_data_opts), its sources and the options of the input. */
static dp_data *open_data(const char *const *paths, size_t n, const char *cmd, int train)
{
	dp_data_opts o = {0};
	if ((C.decode == DP_DECODE_IMAGE || C.hwc) && R.in.rank == 1)
		cli_job_usage_error("%s needs --input-shape C x H x W (3x224x224), not a length",
			    C.hwc ? "--layout hwc" : "--decode image");
	if (train && R.in.rank == 3 && R.in.c > 4 && R.in.w <= 4)
		note("--input-shape %dx%dx%d is C x H x W: %d channels of %dx%d; channels-last data "
		     "is --input-shape %dx%dx%d --layout hwc", R.in.c, R.in.h, R.in.w, R.in.c, R.in.h,
		     R.in.w, R.in.w, R.in.c, R.in.h);
	dp_run_data_opts(&C, M, &R.in, train, &o);
	o.inputs = paths;
	o.ninputs = n;
	o.cmd = cmd;
	/* with several ranks a short global batch is dropped by all (main) */
	o.drop_last = train && REPS == 1 ? C.drop_last : 0;
	/* a stream read in a single epoch needs no cache (nor counted first) */
	o.cache = train && C.epochs <= 1 && !C.warmup_epochs && !O.given[O_CACHE] ? DP_CACHE_NONE
										   : O.cache;
	o.cache_limit = O.cache_limit;
	o.cache_dir = O.cache_dir;
	o.prefetch = O.prefetch;
	o.rank = REP; /* a pipeline's replica: its first stage reads */
	o.size = REPS;
	if (shared(paths, n, cmd)) {
		/* training: rank r takes the r-th slice of every global batch
		 * (dp_data.h); validation: every size-th record */
		o.shard_index = (unsigned)REP;
		o.shard_count = (unsigned)REPS;
		o.shard_block = train ? C.batch : 0;
	}
	o.alloc = (void *(*)(void *, size_t))R.be->host_alloc;
	o.free = (void (*)(void *, void *))R.be->host_free;
	o.alloc_ctx = R.ctx;
	o.decode_threads = O.in.decode_threads;
	o.skip_corrupt = O.in.skip_corrupt;
	o.rec.max_record = O.in.max_record;
	o.on_skip = skip_warn;
	dp_err e;
	dp_data *d = dp_data_open(&o, &e);
	if (!d)
		cli_die("%s: %s", train ? "train" : "val", e.msg);
	return d;
}

/* ---- the job ------------------------------------------------------------------------ */

static volatile uint64_t cur_step; /* for stall reports, from the communication thread */

static void stall_report(void *ctx, const char *msg)
{
	fprintf(stderr, "%s: rank %d: step %" PRIu64 ": %s\n", cli.prog, RANK,
		__atomic_load_n(&cur_step, __ATOMIC_RELAXED) + 1, msg);
}

/* The checkpoint to resume or start from.  In a job, rank 0 reads and
 * checks it and sends the bytes to all: only rank 0's machine needs the
 * file. */
static dp_st *open_ckpt(const char *path)
{
	dp_err e = {0};
	int alike;
	dp_st *ck = dp_job_st_open(COMM, path, &alike, &e);
	if (!ck && alike)
		die_all(1, "%s", e.msg);
	if (!ck)
		cli_die("%s", e.msg);
	return ck;
}

/* What every rank must agree on, one setting a line: dp_comm_check_same
 * compares them at the start, so that ranks started with different
 * options (mpirun's MPMD syntax, another dp-train on one host) or builds
 * are told apart before they train out of step.  dp-train(1) lists the
 * options (tests/dp-train-mpi-settings.t tries each). */
static char *settings_text(void)
{
	dp_job_settings j = {
		.stages = O.stages, .micro = O.micro, .schedule = O.psched, .resume = !!O.resume,
		.init = !!O.init, .summary = O.summary, .max_steps = O.max_steps,
		.uneven_drop = O.uneven_drop,
		.train = shared(O.train, O.ntrain, O.train_cmd) ? "shared" : "per-rank",
		.val = !O.nval && !O.val_cmd ? "none" : shared(O.val, O.nval, O.val_cmd) ? "shared"
											   : "per-rank",
		.log_every = O.log_every, .ckpt_every = O.ckpt_every, .ckpt_epochs = O.ckpt_epochs,
		.ckpt = O.ckpt != NULL, .output = O.output != NULL, .overlap = O.overlap,
		.bucket = O.bucket,
		.timeline = !O.timeline ? "none" : names_rank(O.timeline) ? "per-rank" : "gathered",
		.wire = O.wire, .algo = O.algo, .reset = O.reset, .classes = O.classes,
		.save_best = O.save_best != NULL, .skip_corrupt = O.in.skip_corrupt,
		.max_skipped = O.in.max_skipped};
	char *t = dp_job_settings_text(&C, &j, COMM);
	if (!t)
		cli_die("out of memory");
	return t;
}

/* The learning rate of update `step`: the schedule over --lr (times the
 * ranks with --scale-lr), then the ramps of --warmup (dp_sched) and
 * --warmup-epochs (from the single-worker rate, Horovod's recipe). */
static double rate(const dp_sched *sched, uint64_t epoch, uint64_t step, uint64_t ramp)
{
	/* the plateau's rate, or --lr; the schedule starts from it */
	double base = CTL.plateau ? CS.lr : C.lr * (C.scale_lr ? REPS : 1);
	double lr = dp_sched_lr(sched, base, epoch, step);
	if (ramp && step < ramp && C.scale_lr && REPS > 1) {
		double f0 = 1.0 / REPS;
		lr *= f0 + (1 - f0) * (double)step / (double)ramp;
	}
	return lr;
}

/* At the end: every rank must hold what rank 0 holds. */
static void check_same_state(uint64_t step)
{
	uint64_t h;
	char *diff;
	dp_err e;
	if (dp_trainer_check_same(TR, COMM, &h, &diff, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	char hb[24], qb[24], sb[24];
	snprintf(hb, sizeof hb, "%016" PRIx64, h);
	snprintf(qb, sizeof qb, O.json ? "\"%s\"" : "%s", hb);
	snprintf(sb, sizeof sb, "%" PRIu64, step);
	const char *keys[] = {"step", "state_fnv1a64"}, *vals[] = {sb, qb};
	log_line(keys, vals, 2, 1);
	for (char *l = diff, *nl; RANK == 0 && l && (nl = strchr(l, '\n')); l = nl + 1)
		fprintf(stderr, "%s: %.*s\n", cli.prog, (int)(nl - l), l);
	if (diff)
		die_all(1, "the ranks ended out of step: a bug; please report it");
	if (O.stages > 1 && REPS > 1)
		note("each stage's %d replicas hold the same weights and optimizer state", REPS);
	else if (SIZE > 1 && O.stages <= 1)
		note("all %d ranks hold the same weights and optimizer state (fnv1a64 %s)", SIZE, hb);
}

/* ---- validation ------------------------------------------------------------------------
 *
 * After an epoch: every record once, in order, the ranks each taking a
 * share (every size-th record).  The sums are dp-eval's exact ones
 * (dp_eval.h), added up over the ranks in one allreduce, so that the
 * figures do not depend on the number of ranks and are those dp-eval
 * reports on the checkpoint for the same records. */

/* --max-skipped: the job's count of records skipped as corrupt (of
 * `read`) in an epoch's training or validation, against the limit; every
 * rank holds the same counts (summed) and stops alike. */
static void check_skipped(const char *what, uint64_t epoch, uint64_t skipped, uint64_t read)
{
	double frac = read ? (double)skipped / (double)read : 0;
	int pct = !strcmp(O.in.skip_gate.metric, "skipped_fraction");
	if (dp_gate_pass(&O.in.skip_gate, pct ? frac : (double)skipped))
		return;
	die_all(1, "epoch %" PRIu64 ": %s: %" PRIu64 " of %" PRIu64 " records (%.3g%%) skipped as "
		"corrupt, more than --max-skipped %s allows: the model would be trained or judged "
		"on a part of the data",
		epoch + 1, what, skipped, read, 100 * frac,
		O.in.max_skipped ? O.in.max_skipped : DP_MAX_SKIPPED_DEFAULT);
}

/* A validation line: the job's, or this rank's own share (own). */
static void val_line(uint64_t epoch, uint64_t step, int own)
{
	dp_eval_report r;
	dp_err e;
	if (dp_eval_report_get(R.val, &r, &e) < 0) { /* no samples */
		if (!own)
			die_all(1, "val: no records");
		memset(&r, 0, sizeof r); /* a rank without a share: zeros */
	}
	char v[6][40];
	snprintf(v[0], 40, "%" PRIu64, epoch + 1);
	snprintf(v[1], 40, "%" PRIu64, step);
	snprintf(v[2], 40, "%.6g", r.loss);
	snprintf(v[3], 40, "%.4f", r.accuracy);
	snprintf(v[4], 40, "%" PRIu64, r.samples);
	snprintf(v[5], 40, "%" PRIu64, r.skipped);
	const char *keys[] = {"epoch", "step", "val_loss", R.xent ? "val_accuracy" : "val_samples",
			      R.xent ? "val_samples" : "val_skipped", "val_skipped"};
	const char *vals[] = {v[0], v[1], v[2], R.xent ? v[3] : v[4], R.xent ? v[4] : v[5], v[5]};
	log_line(keys, vals, (R.xent ? 5 : 4) + O.in.skip_corrupt, own);
}

static void validate(uint64_t epoch, uint64_t step)
{
	dp_err e;
	double t0 = dp_now();
	dp_eval_reset(R.val);
	if ((VD && dp_data_epoch(VD, epoch, 0, &e) < 0) || dp_trainer_eval(TR, R.val, VD, &e) < 0)
		cli_die("val: %s", e.msg);
	dp_comm_event(COMM, "validate", 1, t0, dp_now());
	val_line(epoch, step, 1);
	if (dp_eval_allreduce(R.val, COMM, NULL, 0, &e) < 0)
		cli_die("val: %s", e.msg);
	val_line(epoch, step, 0);
	dp_eval_report r;
	if (dp_eval_report_get(R.val, &r, &e) == DP_OK)
		check_skipped("validation", epoch, r.skipped, r.skipped + r.samples);
}

/* ---- set-up ------------------------------------------------------------------------------ */

/* The backend, and the job: MPI under a launcher. */
static void join_job(void)
{
	dp_err e;
	R.be = dp_backend_default();
	if (!O.threads)
		O.threads = dp_default_threads(&R.cpus, &R.local);
	dp_backend_opts bo = {.threads = O.threads, .device = O.gpu, .precision = C.precision,
			      .deterministic = O.deterministic};
	if (R.be->open(&R.ctx, &bo, R.desc, sizeof R.desc, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	if (!(COMM = dp_comm_open(R.be, R.ctx, &e)))
		cli_die_err(CLI_FAIL, &e);
	set_rank(dp_comm_rank(COMM), dp_comm_size(COMM));
	dp_comm_conf cc;
	dp_comm_conf_defaults(&cc);
	cc.overlap = O.overlap;
	cc.bucket_bytes = (size_t)O.bucket;
	cc.wire = O.wire;
	cc.algo = O.algo;
	cc.stall_warn = O.stall;
	cc.stall_abort = O.stall_abort;
	cc.report = stall_report;
	if (dp_comm_configure(COMM, &cc, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
}

/* The checkpoint to resume or start from, and the settings it gives:
 * with --resume, every one the command line leaves out; with --init, the
 * model, when neither --model nor --input-shape is given. */
static void start_from_checkpoint(void)
{
	if (!O.resume && !O.init)
		return;
	R.ck = open_ckpt(O.resume ? O.resume : O.init);
	if (O.resume) {
		settings_from(R.ck, NULL);
	} else if (!O.given[O_MODEL] && !O.given[O_INPUT_SHAPE]) {
		if (!dp_st_meta(R.ck, "model"))
			cli_job_usage_error("--init %s: no dp-train metadata (a PyTorch state_dict?): give the "
				    "model with --model and --input-shape", O.init);
		static const int model_keys[] = {DP_RUN_MODEL, DP_RUN_INPUT_SHAPE, DP_RUN_LOSS, -1};
		settings_from(R.ck, model_keys);
	}
}

/* Every rank started alike?  (before any check that could fail on some
 * ranks only) */
static void check_same_settings(void)
{
	dp_err e;
	char *stext = settings_text();
	if (dp_comm_check_same(COMM, stext, &e) < 0)
		die_all(2, "%s", e.msg);
	free(stext);
}

/* --model @FILE: the spec in a file (newlines and # comments allowed). */
static char *model_file(const char *path)
{
	dp_buf b = DP_BUF_INIT;
	dp_err e;
	if (dp_read_file(path, path, 1 << 20, &b, &e) < 0)
		cli_job_usage_error("--model @%s", e.msg);
	if (strlen(b.p ? b.p : "") != b.len)
		cli_job_usage_error("--model @%s: a NUL byte at byte %zu: not a text file", path, strlen(b.p));
	return b.p ? b.p : cli_strdup("");
}

/* --classes N (a named model's outputs) or NAMES (as many outputs, and
 * the names kept in the checkpoint's metadata). */
static void classes_opt(const char *v)
{
	dp_err e;
	if (strspn(v, "0123456789") == strlen(v)) {
		O.classes = (int)cli_count("--classes", v, 2, 1 << 24);
		return;
	}
	O.nnames = 0;
	free(O.names);
	if (dp_classes_parse(v, &O.nnames, &O.names, &e) < 0)
		cli_job_usage_error("--classes: %s", e.msg);
	if (O.nnames < 2)
		cli_job_usage_error("--classes: %zu name: a classifier has 2 classes or more", O.nnames);
	O.classes = (int)O.nnames;
	char *json = dp_classes_json((const char *const *)O.names, O.nnames);
	if (!json)
		cli_die("out of memory");
	C.classes = json;
	C.given[DP_RUN_CLASSES] = 1;
}

static void make_model(void)
{
	dp_err e;
	if (!C.model)
		cli_job_usage_error("no model: give --model SPEC (e.g. --model dense:128,relu,dense:10)");
	if (!C.input_shape)
		cli_job_usage_error("no input shape: give --input-shape (e.g. 1x28x28 or 784)");
	if (dp_shape_parse(C.input_shape, &R.in, &e) < 0)
		bad_setting(C.from[DP_RUN_INPUT_SHAPE], "%s", e.msg);
	char *spec = C.model[0] == '@' ? model_file(C.model + 1) : cli_strdup(C.model);
	if (O.classes && (!O.names || dp_model_named(spec))) {
		int k = dp_model_named(spec);
		if (!k)
			cli_job_usage_error("--classes is for a named model (resnet18, resnet20, ...): end "
				    "'%s' with dense:CLASSES", C.model);
		char *t = NULL;
		if (k == 1 && asprintf(&t, "%s:%d", spec, O.classes) < 0)
			cli_die("out of memory");
		if (k == 2 && atoi(strchr(spec, ':') + 1) != O.classes)
			bad_setting(C.from[DP_RUN_MODEL], "--classes %d, but the model is %s", O.classes,
				    spec);
		if (t) {
			free(spec);
			spec = t;
		}
	}
	if (!(M = dp_model_new(spec, &R.in, C.loss, &e)))
		bad_setting(C.from[DP_RUN_MODEL], "%s", e.msg);
	free(spec);
	C.model = dp_model_spec(M); /* as parsed: one line, comments gone */
	R.xent = dp_model_loss_kind(M) == DP_LOSS_XENT;
	if (O.names && (!R.xent || O.nnames != dp_model_out_size(M)))
		cli_job_usage_error("--classes: %zu names for a model of %zu %s", O.nnames,
			    dp_model_out_size(M), R.xent ? "classes" : "outputs (a regression model)");
}

static void conv_algos_resume(void);

/* The step's settings (dp_train.h). */
static dp_step_conf step_conf(void)
{
	dp_step_conf sc = {C.batch, C.accumulate, C.clip_norm, C.seed, C.sync_bn,
			   O.stages, O.micro, O.psched};
	return sc;
}

/* --summary: the layers, the pipeline's cut, what runs each convolution
 * layer at --batch-size and why (the backend times them now, as the run
 * would, unless --deterministic or a checkpoint's choices say); the end
 * of the run. */
static int show_summary(void)
{
	dp_err e;
	if (C.freeze && *C.freeze && dp_model_freeze(M, C.freeze, &e) < 0)
		bad_setting(C.from[DP_RUN_FREEZE], "--freeze: %s", e.msg);
	if (O.recompute && dp_model_set_recompute(M, O.recompute, &e) < 0)
		cli_job_usage_error("%s", e.msg);
	if (RANK == 0)
		print_text(dp_train_summary(M, C.batch));
	dp_step_conf sc = step_conf();
	char *text = RANK == 0 && O.stages > 1 ? dp_train_summary_pipeline(M, &sc, &e) : NULL;
	if (RANK == 0 && O.stages > 1 && !text && e.code == DP_EARG)
		cli_job_usage_error("--pipeline-stages %d: %s", O.stages, e.msg);
	if (RANK == 0 && O.stages > 1)
		print_text(text);
	conv_algos_resume();
	if (dp_train_summary_convs(M, R.be, R.ctx, C.batch, R.desc, &text, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	if (RANK == 0)
		print_text(text);
	free(RANK == 0 ? NULL : text);
	dp_model_free(M);
	dp_st_close(R.ck);
	dp_comm_close(COMM);
	COMM = NULL;
	R.be->close(R.ctx);
	return cli_close_stdout() < 0 ? CLI_FAIL : CLI_OK;
}

/* The checkpoint must hold the model being trained. */
static void check_ckpt_model(void)
{
	dp_err e;
	if (!R.ck || (O.init && (O.reset || !dp_st_meta(R.ck, "model"))))
		return; /* a state_dict, or a new head: dp_ckpt_load_init checks tensor by tensor */
	if (dp_run_check_model(R.ck, M, &e) < 0)
		die_all(1, "%s", e.msg);
}

/* Under mpirun a stream read by several ranks would be torn between them. */
static void check_streams(void)
{
	for (int v = 0; v < 2 && SIZE > 1; v++) {
		const char **ps = v ? O.val : O.train;
		size_t nps = v ? O.nval : O.ntrain;
		struct stat sb;
		for (size_t i = 0; i < nps && !per_rank(ps, nps, NULL); i++)
			if (!strcmp(ps[i], "-") || (stat(ps[i], &sb) == 0 && S_ISFIFO(sb.st_mode)))
				cli_job_usage_error("--%s %s: under mpirun %s: give files, a FIFO a rank "
					    "({rank}), or --%s-cmd 'CMD' (a stream a rank with {rank})",
					    v ? "val" : "train", ps[i],
					    strcmp(ps[i], "-") ? "every rank would read the same FIFO"
							       : "standard input reaches rank 0 only",
					    v ? "val" : "train");
	}
}

/* The options that go together, and those that do not. */
static void check_options(void)
{
	dp_err e;
	if (!dp_model_nparams(M))
		cli_job_usage_error("model '%s' has no parameters to train", C.model);
	if (!O.ntrain && !O.train_cmd)
		cli_job_usage_error("no training data: give --train FILE or --train-cmd CMD");
	if (O.ntrain && O.train_cmd)
		cli_job_usage_error("--train and --train-cmd exclude each other");
	if (O.nval && O.val_cmd)
		cli_job_usage_error("--val and --val-cmd exclude each other");
	for (size_t i = 0; i < O.nval; i++)
		for (size_t j = 0; j < O.ntrain; j++)
			if (!strcmp(O.val[i], "-") && !strcmp(O.train[j], "-"))
				cli_job_usage_error("stdin can hold the training or the validation records, not both");
	if (O.ckpt_every && !O.ckpt && !O.output)
		cli_job_usage_error("--checkpoint-every needs -o or --checkpoint");
	if (O.ckpt && !O.ckpt_every)
		O.ckpt_every = 1, O.ckpt_epochs = 1;
	if (O.output && !strcmp(O.output, "-") && !O.log)
		cli_job_usage_error("-o - would mix the checkpoint with the log on stdout: give --log FILE");
	check_streams();
	if (O.stages > 1) {
		if (SIZE % O.stages)
			cli_job_usage_error("--pipeline-stages %d under %d rank%s: start stages x replicas ranks "
				    "(mpirun -np %d, %d, ...)", O.stages, SIZE, SIZE == 1 ? "" : "s",
				    O.stages, 2 * O.stages);
		if (C.sync_bn)
			cli_job_usage_error("--sync-bn with --pipeline-stages: not supported (batchnorm's "
				    "statistics are each micro-batch's)");
		dp_step_conf sc = step_conf();
		if (dp_pipe_micro(&sc) > C.batch)
			cli_job_usage_error("--micro-batches %" PRIu64 " of a step of %" PRIu64 " samples "
				    "(--batch-size): at most one a sample", dp_pipe_micro(&sc), C.batch);
	} else if (O.given[O_MICRO] || O.given[O_PIPE_SCHED]) {
		cli_job_usage_error("--%s needs --pipeline-stages S (S > 1)",
			    O.given[O_MICRO] ? "micro-batches" : "pipeline-schedule");
	}
	if (C.warmup_epochs > 0 && !C.scale_lr)
		bad_setting(C.from[DP_RUN_WARMUP_EPOCHS] && C.from[DP_RUN_SCALE_LR], "--warmup-epochs ramps up to the rate of --scale-lr: give --scale-lr too "
			    "(or --warmup N to ramp from 0)");
	R.sched.epochs = C.epochs;
	R.sched.warmup = C.warmup;
	if (dp_sched_parse(C.schedule, &R.sched, &e) < 0)
		bad_setting(C.from[DP_RUN_SCHEDULE], "%s", e.msg);
	int om = C.from[DP_RUN_NESTEROV]; /* an optimizer setting from the checkpoint */
	for (int k = DP_RUN_OPTIMIZER; k <= DP_RUN_WD; k++)
		om |= C.from[k];
	if (dp_optim_check(&C.opt, &e) < 0)
		bad_setting(om, "%s", e.msg);
}

/* Path template tmpl as this rank names it: {rank} and {size} filled in
 * (malloc'd). */
static char *rank_path(const char *tmpl)
{
	char rb[16], zb[16];
	snprintf(rb, sizeof rb, "%d", RANK);
	snprintf(zb, sizeof zb, "%d", SIZE);
	const char *vars[] = {"rank", rb, "size", zb, NULL};
	return cli_expand(tmpl, vars);
}

/* Check before the work that output `tmpl` of option opt can be created
 * (dp_out_check), as this rank will name it: {rank} and {size} filled in.
 * A name still holding {step} or {epoch} is known only when saved: its
 * directory is checked (a name of that directory with placeholders, not
 * at all). */
static void check_output(const char *opt, const char *tmpl)
{
	char *path = rank_path(tmpl);
	const char *slash = strrchr(path, '/');
	dp_err e;
	int later = strstr(path, "{step") || strstr(path, "{epoch");
	if (!(later && slash && memchr(path, '{', (size_t)(slash - path))) &&
	    dp_out_check(path, &e) < 0)
		cli_die("%s %s", opt, e.msg);
	free(path);
}

/* fn(option, path template) for each output this rank writes: -o and
 * --checkpoint (rank 0 writes them), --log (rank 0's, and with
 * --log-all-ranks every rank's {rank} file), --timeline (rank 0's, or
 * every rank's with {rank}). */
static void each_output(void (*fn)(const char *opt, const char *tmpl))
{
	if (RANK == 0 && O.output)
		fn("-o", O.output);
	if (RANK == 0 && O.ckpt)
		fn("--checkpoint", O.ckpt);
	if (RANK == 0 && O.save_best)
		fn("--save-best", O.save_best);
	if (O.log && (RANK == 0 || (O.log_all && names_rank(O.log))))
		fn("--log", O.log);
	if (O.timeline && (RANK == 0 || names_rank(O.timeline)))
		fn("--timeline", O.timeline);
}

/* Two outputs naming one file would lose one (--log X -o X, --log X
 * --timeline X): refused, naming both.  -o and --checkpoint may share
 * one: the same kind of file, the latest state. */
static void check_distinct_outputs(void)
{
	const char *opt[5] = {"-o", "--checkpoint", "--log", "--timeline", "--save-best"};
	const char *val[5] = {O.output, O.ckpt, O.log, O.timeline, O.save_best};
	for (int i = 0; i < 5; i++)
		for (int j = i + 1; j < 5; j++) {
			if (!val[i] || !val[j] || (i == 0 && j == 1))
				continue;
			char *a = rank_path(val[i]), *b = rank_path(val[j]);
			if (dp_same_output(a, b))
				cli_job_usage_error("%s %s and %s %s name one file: one would be lost", opt[i],
					    val[i], opt[j], val[j]);
			free(a);
			free(b);
		}
}

/* An output that is one of the training or validation files would
 * replace it (or, for --log, empty it before it is read): refused, before
 * the work.  Names with {step} or {epoch} are known only when saved. */
static void check_not_input(const char *opt, const char *tmpl)
{
	char *path = rank_path(tmpl);
	int t = TD && dp_data_reads(TD, path), v = !t && VD && dp_data_reads(VD, path);
	if (t || v)
		cli_die("%s %s: is one of the %s files: it would be %s", opt, path,
			t ? "training" : "validation",
			strcmp(opt, "--log") ? "replaced" : "emptied before it is read");
	free(path);
}

static void check_outputs_not_inputs(void)
{
	each_output(check_not_input);
	/* standard output (the log, or -o -) redirected to an input:
	 * `dp-train --train d.tfr >> d.tfr` */
	int to_stdout = (RANK == 0 || O.log_all) && (!O.log || !strcmp(O.log, "-") ||
						     (RANK != 0 && !names_rank(O.log)));
	if (RANK == 0 && O.output && !strcmp(O.output, "-"))
		to_stdout = 1;
	if (to_stdout && ((TD && dp_data_reads(TD, "/proc/self/fd/1")) ||
			  (VD && dp_data_reads(VD, "/proc/self/fd/1"))))
		cli_die("stdout: is one of the training or validation files: writing there would "
			"damage them");
}

/* The log: rank 0's, and with --log-all-ranks every rank's ({rank} in
 * --log: a file each; else the others write to their stdout). */
static void open_log(void)
{
	logfp = NULL;
	if (RANK == 0 || O.log_all) {
		logfp = stdout;
		const char *lp = O.log;
		if (lp && RANK != 0 && !names_rank(lp))
			lp = NULL;
		if (lp && strcmp(lp, "-")) {
			char *own = rank_path(lp);
			if (!(logfp = fopen(own, O.resume ? "a" : "w")))
				cli_die("%s: %s", own, strerror(errno));
			free(own);
		}
	}
	cli_progress_on(RANK == 0 &&
			(O.progress == 1 || (O.progress < 0 && !O.quiet && isatty(STDERR_FILENO))));
}

/* The optimizer state and the position in the data of the run resumed
 * (another number of ranks: only with the same global batch, and data
 * split between the ranks, so that it goes on where it was). */
static void resume_state(dp_st *ck)
{
	dp_err e;
	int moved, split = !per_rank(O.train, O.ntrain, O.train_cmd) && O.shard != 0;
	if (dp_run_resume(ck, M, OPT, &C, REPS, REP, split, &R.ts, &resume_pos, &moved, &e) < 0)
		die_all(1, "%s", e.msg);
	if (moved)
		note("%s: saved by %d rank%s, resumed by %d with the same global batch (%" PRIu64
		     "): the data goes on where it was",
		     dp_st_name(ck), C.ranks, C.ranks == 1 ? "" : "s", REPS,
		     C.batch * C.accumulate * (uint64_t)REPS);
}

/* The convolution algorithms (cuDNN's, the CPU's implementations): those
 * the checkpoint resumed from recorded, for its shapes (on the same GPU
 * model or CPU kernels, libraries, precision and threads; ignored
 * elsewhere); after binding, rank 0's choices on every rank, so that the
 * ranks run the same algorithms (a rank whose own timing chose otherwise
 * would keep the others waiting, and compute other bits). */
static void conv_algos_resume(void)
{
	const char *a = R.ck && O.resume ? dp_st_meta(R.ck, "conv_algos") : NULL;
	if (a && *a && R.be->conv_algos_take)
		R.be->conv_algos_take(R.ctx, a);
}

/* The convolution algorithms as text (conv_algos), or NULL. */
static char *conv_algos_text(void) { return dp_backend_conv_algos_text(R.be, R.ctx); }

static void conv_algos_agree(void)
{
	dp_err e;
	if (dp_job_conv_algos_agree(COMM, R.be, R.ctx, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
}

/* The model on the backend, the optimizer, the weights (the
 * checkpoint's, or fresh), the same on every rank. */
static void setup_model(void)
{
	dp_err e;
	dp_step_conf sc = step_conf();
	uint64_t bind = C.batch;
	if (O.stages > 1) { /* this rank's stage of the model, micro-batches in flight */
		dp_pipe_plan pl;
		if (dp_pipe_plan_model(M, &sc, RANK, SIZE, &pl, &e) < 0)
			die_all(e.code == DP_EARG ? 2 : 1, "--pipeline-stages: %s", e.msg);
		bind = pl.micro_batch;
	}
	conv_algos_resume();
	if (dp_model_bind(M, R.be, R.ctx, bind, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	conv_algos_agree();
	if (!(OPT = dp_optim_new(&C.opt, R.be, R.ctx, dp_model_nparams(M), &e)))
		cli_die_err(CLI_FAIL, &e);
	const char **pats[] = {&C.freeze, &C.no_decay, &C.lr_mult}; /* "" in metadata: none */
	for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++)
		if (*pats[i] && !**pats[i])
			*pats[i] = NULL;
	if ((C.freeze || C.no_decay || C.lr_mult) &&
	    dp_optim_set_tensors(OPT, M, C.freeze, C.no_decay, C.lr_mult, &e) < 0)
		bad_setting(C.from[DP_RUN_FREEZE] || C.from[DP_RUN_LR_MULT] || C.from[DP_RUN_NO_DECAY],
			    "--freeze, --lr-mult, --no-decay: %s", e.msg);
	if (dp_model_set_label_smoothing(M, C.smooth, &e) < 0)
		bad_setting(C.from[DP_RUN_SMOOTH], "--label-smoothing: %s", e.msg);
	if (C.freeze && dp_model_freeze(M, C.freeze, &e) < 0)
		bad_setting(C.from[DP_RUN_FREEZE], "--freeze: %s", e.msg);
	if (O.recompute && dp_model_set_recompute(M, O.recompute, &e) < 0) {
		if (e.code == DP_EARG)
			cli_job_usage_error("%s", e.msg);
		cli_die_err(CLI_FAIL, &e);
	}
	if (!(TR = dp_trainer_new(M, OPT, COMM, &sc, &e)))
		cli_die_err(CLI_FAIL, &e);
	R.ts = (dp_train_state){C.seed, 0, 0, 0};
	if (!R.ck || O.init) /* --init: what --reset leaves */
		dp_model_init(M, C.seed);
	if (O.init && dp_ckpt_load_init(R.ck, M, O.reset, &e) < 0)
		die_all(e.code == DP_EARG ? 2 : 1, "%s%s", e.code == DP_EARG ? "--reset: " : "", e.msg);
	if (O.resume) {
		if (dp_ckpt_load_weights(R.ck, M, &e) < 0)
			die_all(1, "%s", e.msg);
		resume_state(R.ck);
	}
	/* every worker starts from worker 0's weights and running statistics
	 * (a pipeline's: its stage's first replica's) */
	if (dp_trainer_broadcast(TR, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
}

/* The training and validation data, what the run is said to be, the
 * ramp of --warmup-epochs, the timeline. */
static void setup_data(void)
{
	dp_err e;
	int tshare = shared(O.train, O.ntrain, O.train_cmd);
	if (dp_trainer_reads(TR)) /* not a pipeline's later stages */
		TD = open_data(O.train, O.ntrain, O.train_cmd, 1);
	if (O.nval || O.val_cmd) {
		if (dp_trainer_reads(TR))
			VD = open_data(O.val, O.nval, O.val_cmd, 0);
		if (!(R.val = dp_eval_new_for(M, 0, &e)))
			cli_die("val: %s", e.msg);
	}
	char thr[128] = ""; /* where the default thread count came from */
	if (R.cpus && (R.be->caps & DP_CAP_HOST_MEMORY))
		snprintf(thr, sizeof thr, " (the CPUs this rank may use, %d, or its share of the host's: "
			 "%d rank%s on it; --threads sets it)", R.cpus, R.local, R.local == 1 ? "" : "s");
	note("%zu parameters, %s%s, %s; %zu training source%s", dp_model_nparams(M), R.desc, thr,
	     dp_comm_desc(COMM), TD ? dp_data_nsources(TD) : 0,
	     TD && dp_data_nsources(TD) == 1 ? "" : "s");
	note_text(dp_train_memory_note(M, OPT));
	char *pipe = dp_train_pipeline_note(TR, M, C.batch, O.psched);
	if (pipe)
		note_text(pipe);
	memory_check();
	char how[80]; /* what a global batch is made of */
	if (C.accumulate > 1)
		snprintf(how, sizeof how, "%" PRIu64 " %s of %d x %" PRIu64, C.accumulate,
			 O.stages > 1 ? "steps" : "micro-batches", REPS, C.batch);
	else
		snprintf(how, sizeof how, "%d x %" PRIu64, REPS, C.batch);
	if (REPS > 1 || C.accumulate > 1)
		note("global batch %" PRIu64 " (%s)%s%s%s", C.batch * C.accumulate * REPS, how,
		     REPS > 1 ? "; training data " : "",
		     REPS == 1 ? "" : tshare ? "shared: rank r takes the r-th slice of each global batch" : "per rank",
		     O.overlap ? "" : "; gradients reduced after the backward pass (--no-overlap)");
	if (R.ck) {
		if (O.resume && R.ts.epoch >= C.epochs)
			note("%s: all %" PRIu64 " epochs done (step %" PRIu64 "): nothing to train "
			     "(more with --epochs)",
			     dp_st_name(R.ck), C.epochs, R.ts.step);
		else if (O.resume && O.max_steps && R.ts.step >= O.max_steps)
			note("%s: at step %" PRIu64 " already (--max-steps %" PRIu64 "): nothing to train",
			     dp_st_name(R.ck), R.ts.step, O.max_steps);
		else if (O.resume)
			note("resuming %s at epoch %" PRIu64 ", step %" PRIu64, dp_st_name(R.ck),
			     R.ts.epoch + 1, R.ts.step);
		dp_st_close(R.ck);
		R.ck = NULL;
	}
	if (C.warmup_epochs > 0 && REPS > 1) {
		/* the ramp's length: given, from the checkpoint resumed, or
		 * counted from the files (a pass without decoding); a command's
		 * epoch can be read only once (a Pipe-mode FIFO, a download) */
		if (!C.steps_per_epoch && O.train_cmd)
			cli_job_usage_error("--warmup-epochs with --train-cmd: the updates of an epoch are not "
				    "known before it is read, and counting them would run the command "
				    "of epoch 1 twice: give --steps-per-epoch N");
		uint64_t spe = C.steps_per_epoch;
		if (!spe && dp_trainer_count_steps(TR, COMM, TD, &C, O.uneven_drop, &spe, &e) < 0)
			cli_die("train: %s", e.msg);
		C.steps_per_epoch = spe;
		R.ramp = (uint64_t)ceil(C.warmup_epochs * (double)spe);
		note("--warmup-epochs %g: %" PRIu64 " updates of %" PRIu64 " an epoch%s", C.warmup_epochs,
		     R.ramp, spe, O.given[O_STEPS_PER_EPOCH] ? " (--steps-per-epoch)" : "");
	}
	if (O.timeline && dp_comm_timeline_start(COMM, &e) < 0)
		cli_die("timeline: %s", e.msg);
	R.ckpt_path = O.ckpt ? O.ckpt : O.output;
	R.mt.t0 = dp_now();
}

/* ---- the epochs ------------------------------------------------------------------------ */

/* The next micro-batch of the job: this rank's batch (none once *out),
 * and how many samples every rank has in it (a collective: every rank
 * calls it at every step).  *t0: when it began. */
static dp_step next_step(int *out, double *t0)
{
	dp_err e;
	dp_step s = {0};
	*t0 = dp_now();
	if (!TD) /* a pipeline's later stage: the first stage's counts come */
		*out = 1;
	if (!*out) {
		const dp_batch *b;
		int rc = dp_data_next(TD, &b, &e);
		if (rc < 0)
			cli_die("train: %s", e.msg);
		if (rc == 0)
			*out = 1;
		else {
			s = (dp_step){.x = b->x, .y = R.xent ? (const void *)b->y : b->t, .n = b->n};
			data_pos = b->pos;
		}
	}
	dp_comm_event(COMM, "data", 1, *t0, dp_now());
	if (dp_step_agree(TR, &s, &e) < 0)
		cli_die("train: %s", e.msg);
	return s;
}

static void __attribute__((noreturn)) diverged(uint64_t epoch, double loss)
{
	const char *what = isnan(loss) ? "NaN" : "infinite";
	if (have_ckpt)
		cli_die_code(TRAIN_DIVERGED,
			     "epoch %" PRIu64 ", step %" PRIu64 ": loss is %s: training diverged; the "
			     "last good checkpoint is %s (step %" PRIu64 ")",
			     epoch + 1, R.ts.step + 1, what, last_ckpt, last_ckpt_step);
	cli_die_code(TRAIN_DIVERGED,
		     "epoch %" PRIu64 ", step %" PRIu64 ": loss is %s: training diverged (lower "
		     "--lr?); no checkpoint written",
		     epoch + 1, R.ts.step + 1, what);
}

/* One micro-batch s of update R.ts.step (dp_step_run; s NULL: the update
 * of the micro-batches accumulated, dp_step_flush), begun at t0: 1 when
 * it made the update. */
static int train_step(uint64_t epoch, const dp_step *s, double t0)
{
	dp_err e;
	dp_step_result r;
	__atomic_store_n(&cur_step, R.ts.step, __ATOMIC_RELAXED);
	R.lr = rate(&R.sched, epoch, R.ts.step, R.ramp);
	int rc = s ? dp_step_run(TR, s, R.ts.step, R.lr, &r, &e)
		   : dp_step_flush(TR, R.ts.step, R.lr, &r, &e);
	if (rc < 0 && !isfinite(r.loss))
		diverged(epoch, r.loss);
	if (rc < 0)
		cli_die("train: %s", e.msg);
	if (!r.updated)
		return 0;
	R.iter_time += dp_now() - t0;
	R.iters++;
	R.ts.step++;
	R.ts.epoch_step++;
	R.mt.loss += r.loss_sum;
	R.mt.correct += r.correct;
	R.mt.samples += r.samples;
	R.mt.steps++;
	return 1;
}

/* After an update: the training line, the checkpoint, the progress bar. */
/* Time since t0 was not training (a checkpoint, --on-epoch, histograms):
 * left out of the next line's samples_per_sec, as validation is. */
static void not_training(double t0)
{
	R.mt.t0 += dp_now() - t0;
}

static void after_update(uint64_t epoch)
{
	if (R.ts.step % O.log_every == 0)
		log_train(epoch, R.ts.step, &R.mt, R.lr, R.xent);
	if (O.ckpt_every && !O.ckpt_epochs && R.ts.step % O.ckpt_every == 0) {
		double t0 = dp_now();
		save(R.ckpt_path, &R.ts);
		not_training(t0);
	}
	bar_draw(epoch, R.ts.epoch_step, R.steps_per_epoch, &R.mt);
}

/* The updates of one epoch (the rest of it, when resuming), its training
 * lines and checkpoints: 1 when --max-steps ends the run. */
static int train_epoch(uint64_t epoch)
{
	dp_err e;
	uint64_t skip = epoch == R.ts.epoch ? R.ts.epoch_step : 0;
	R.ts.epoch = epoch;
	R.ts.epoch_step = skip;
	if (TD && dp_data_epoch_at(TD, epoch, skip * C.accumulate, skip ? resume_pos : 0, &e) < 0)
		cli_die("train: %s", e.msg);
	data_pos = skip ? resume_pos : 0;
	resume_pos = 0;
	uint64_t G = C.batch * (uint64_t)REPS, short_steps = 0; /* a micro-batch's */
	int out = 0, stopped = 0; /* out: this rank's data is over */
	double t0 = dp_now();
	for (;;) {
		if (O.max_steps && R.ts.step >= O.max_steps) {
			stopped = 1; /* before the step: a resumed run already there does none */
			break;
		}
		double ts0;
		dp_step s = next_step(&out, &ts0);
		if (!s.gn)
			break; /* the epoch is over everywhere */
		if (O.uneven_drop && s.nout) {
			note("epoch %" PRIu64 ", step %" PRIu64 ": rank %d ran out of data first: "
			     "the other ranks' remaining records (%" PRIu64 " in this step) are "
			     "dropped this epoch (--uneven drop)",
			     epoch + 1, R.ts.step + 1, s.first_out, s.gn);
			break;
		}
		if (REPS > 1 && C.drop_last && s.gn < G) {
			note("epoch %" PRIu64 ": the last global batch (%" PRIu64 " of %" PRIu64
			     " samples) dropped (--last-batch drop)",
			     epoch + 1, s.gn, G);
			dp_step_drop(TR); /* with the update it belongs to */
			break;
		}
		short_steps += s.gn < G;
		if (train_step(epoch, &s, ts0))
			after_update(epoch);
	}
	if (dp_step_pending(TR) && C.drop_last) { /* an update of fewer micro-batches at the end */
		dp_step_drop(TR);
	} else if (dp_step_pending(TR)) {
		train_step(epoch, NULL, dp_now());
		after_update(epoch);
	}
	if (short_steps > 1 && REPS > 1 && !O.uneven_drop)
		note("epoch %" PRIu64 ": the ranks' data ran out at different steps: %" PRIu64
		     " steps had fewer than %" PRIu64 " samples, the ranks out of data "
		     "adding none (--uneven join)",
		     epoch + 1, short_steps, G);
	if (R.mt.steps)
		log_train(epoch, R.ts.step, &R.mt, R.lr, R.xent);
	dp_data_stats ds = {0};
	if (TD)
		dp_data_stats_get(TD, &ds);
	double dt = dp_now() - t0;
	/* the job's images skipped as corrupt, of the records it decoded */
	double sk[2] = {(double)ds.corrupt, (double)(ds.corrupt + ds.samples + ds.dropped)};
	if (O.in.skip_corrupt && dp_comm_allreduce_sum(COMM, sk, 2, &e) < 0)
		cli_die("train: %s", e.msg);
	/* the input's share: decoding images or on threads, and on a GPU,
	 * whose steps are short enough for the reader to be the limit */
	if (C.decode == DP_DECODE_IMAGE || O.in.decode_threads || ds.corrupt ||
	    !(R.be->caps & DP_CAP_HOST_MEMORY))
	{
		char sk_note[64] = "";
		if (C.decode == DP_DECODE_IMAGE || ds.corrupt)
			snprintf(sk_note, sizeof sk_note, "; %.0f image%s skipped as corrupt", sk[0],
				 sk[0] == 1 ? "" : "s");
		note("epoch %" PRIu64 ": waited %.2f s for input (%.1f%% of %.2f s)%s", epoch + 1,
		     ds.wait_s, dt > 0 ? 100 * ds.wait_s / dt : 0.0, dt, sk_note);
	}
	if (O.in.skip_corrupt && !stopped)
		check_skipped("training", epoch, (uint64_t)sk[0], (uint64_t)sk[1]);
	return stopped;
}

/* ---- training control ------------------------------------------------------------------
 *
 * After validation: early stopping, the rate on a plateau and the best
 * epoch (dp_control_epoch), decided by every rank from the job's exact
 * validation sums (the same bits everywhere); each that fires says so in
 * the log (and TensorBoard: tb_line) and in a note. */

/* The monitored metric is one validation reports for this model: asked
 * of a report of one sample, before the work. */
static void check_monitor(void)
{
	dp_err e;
	if (dp_control_check_monitor(&CTL, M, &e) < 0)
		bad_setting(C.from[DP_RUN_MONITOR], "--monitor %s: %s", CTL.monitor, e.msg);
}

/* The settings (from the command line or the checkpoint resumed), and
 * where they stand: a run resumed takes its checkpoint's state. */
static void control_setup(void)
{
	dp_err e;
	dp_control_init(&CTL);
	const char *mon = C.monitor && *C.monitor ? C.monitor : NULL;
	const char *mode = C.monitor_mode && *C.monitor_mode ? C.monitor_mode : NULL;
	static char es_text[256], rlr_text[256];
	if (dp_control_monitor(&CTL, mon, mode, &e) < 0)
		bad_setting(1, "monitor: %s", e.msg);
	if (dp_control_early_stop(&CTL, C.early_stop, &e) < 0)
		bad_setting(1, "early_stopping: %s", e.msg);
	if (dp_control_plateau(&CTL, C.plateau, &e) < 0)
		bad_setting(1, "reduce_lr_on_plateau: %s", e.msg);
	/* every setting in the checkpoints, defaults included */
	C.early_stop = dp_control_early_stop_text(&CTL, es_text, sizeof es_text);
	C.plateau = dp_control_plateau_text(&CTL, rlr_text, sizeof rlr_text);
	CTL.save_best = O.save_best != NULL;
	ctl_on = CTL.early_stop || CTL.plateau || CTL.save_best;
	if (!ctl_on && (mon || mode))
		cli_job_usage_error("--monitor%s goes with --early-stopping, --reduce-lr-on-plateau or --save-best",
			    mon ? "" : "-mode");
	if (ctl_on && !O.nval && !O.val_cmd)
		cli_job_usage_error("--%s watches a validation metric: give --val or --val-cmd",
			    CTL.early_stop ? "early-stopping" : CTL.plateau ? "reduce-lr-on-plateau" : "save-best");
	if (ctl_on)
		check_monitor();
	dp_control_start(&CTL, C.lr * (C.scale_lr ? REPS : 1), &CS);
	if (ctl_on && O.resume && C.control_state && *C.control_state &&
	    dp_control_state_parse(&CS, C.control_state, &e) < 0)
		die_all(1, "%s: metadata: %s", C.src ? C.src : O.resume, e.msg);
	if (CTL.early_stop && CS.stopped) {
		ctl_stopped = 1;
		note("%s: the run stopped early after epoch %" PRIu64 " (--early-stopping): nothing more "
		     "to train", O.resume, CS.stopped_epoch + 1);
	}
}

/* A log line of training control: epoch, step, event=NAME, then pairs;
 * TensorBoard gets the first pair's value as the scalar NAME. */
static void control_line(uint64_t epoch, const char *event, const char *const *k, const char *const *v, int n)
{
	char eb[24], sb[24], evq[64];
	const char *keys[8] = {"epoch", "step", "event"}, *vals[8] = {eb, sb, evq};
	snprintf(eb, sizeof eb, "%" PRIu64, epoch + 1);
	snprintf(sb, sizeof sb, "%" PRIu64, R.ts.step);
	snprintf(evq, sizeof evq, O.json ? "\"%s\"" : "%s", event);
	for (int i = 0; i < n && i < 5; i++)
		keys[3 + i] = k[i], vals[3 + i] = v[i];
	log_line(keys, vals, 3 + n, 0);
}

static void control_epoch(uint64_t epoch)
{
	if (!ctl_on)
		return;
	dp_eval_report rep;
	dp_err e;
	double v;
	if (dp_eval_report_get(R.val, &rep, &e) < 0 || dp_eval_metric(&rep, CTL.monitor + 4, NULL, &v, &e) < 0)
		die_all(2, "--monitor %s: %s", CTL.monitor, e.msg);
	dp_control_result r;
	dp_control_epoch(&CTL, &CS, epoch, v, &r);
	int rc = dp_control_agree(COMM, &r, &e);
	if (rc < 0 && e.code == DP_EDATA)
		die_all(1, "%s", e.msg);
	if (rc < 0)
		cli_die("training control: %s", e.msg);
	char vb[32], b1[32], b2[32];
	snprintf(vb, sizeof vb, "%.6g", v);
	if (r.improved) {
		double t0 = dp_now();
		save(O.save_best, &R.ts);
		not_training(t0);
		dp_buf q = DP_BUF_INIT;
		dp_buf_json_str(&q, last_ckpt, strlen(last_ckpt), 0);
		const char *k[] = {CTL.monitor, "checkpoint"}, *vv[] = {vb, q.p ? q.p : "\"\""};
		control_line(epoch, "save_best", k, vv, 2);
		dp_buf_free(&q);
	}
	if (r.reduced) {
		snprintf(b1, sizeof b1, "%.12g", r.new_lr);
		snprintf(b2, sizeof b2, "%.12g", r.old_lr);
		const char *k[] = {"lr", "previous_lr", CTL.monitor}, *vv[] = {b1, b2, vb};
		control_line(epoch, "reduce_lr_on_plateau", k, vv, 3);
		note("epoch %" PRIu64 ": %s has not improved for %" PRIu64 " epoch%s: the rate lowered from "
		     "%g to %g (--reduce-lr-on-plateau)", epoch + 1, CTL.monitor, CTL.rlr_patience,
		     CTL.rlr_patience == 1 ? "" : "s", r.old_lr, r.new_lr);
	}
	if (r.stop) {
		snprintf(b1, sizeof b1, "%.6g", CS.es_best);
		snprintf(b2, sizeof b2, "%" PRIu64, CS.es_best_epoch + 1);
		const char *k[] = {CTL.monitor, "best", "best_epoch"}, *vv[] = {vb, b1, b2};
		control_line(epoch, "early_stopping", k, vv, 3);
		note("epoch %" PRIu64 ": %s has not improved on %g (epoch %" PRIu64 ") for %" PRIu64
		     " epoch%s: stopping early (--early-stopping)", epoch + 1, CTL.monitor, CS.es_best,
		     CS.es_best_epoch + 1, CS.es_wait, CS.es_wait == 1 ? "" : "s");
		ctl_stopped = 1;
	}
}

/* An epoch's metrics as Keras writes them: train/ and validation/ with
 * the same tags, at the epoch's number from 0. */
static void tb_epoch(uint64_t epoch)
{
	dp_err e;
	dp_eval_report r;
	if (!TB)
		return;
	double n = tb_ep.samples ? (double)tb_ep.samples : 1;
	double tv[] = {tb_ep.loss / n, tb_ep.correct / n, R.lr};
	int val = VD && dp_eval_report_get(R.val, &r, NULL) == 0;
	if (dp_train_tb_epoch(TB, (int64_t)epoch, tv, tb_ep.samples, R.xent, val ? &r : NULL, &e) < 0)
		cli_die("--tensorboard: %s", e.msg);
	memset(&tb_ep, 0, sizeof tb_ep);
}

/* After an epoch's updates: validation, training control, and the
 * checkpoint of --checkpoint-every Ne. */
static void end_epoch(uint64_t epoch)
{
	if (R.ts.epoch_step == 0)
		die_all(1, "train: epoch %" PRIu64 " has no batches (no records%s)", epoch + 1,
			C.drop_last ? ", or fewer than a batch with --last-batch drop" : "");
	R.steps_per_epoch = R.ts.epoch_step;
	if (R.val) {
		average_buffers();
		validate(epoch, R.ts.step);
		R.mt.t0 = dp_now(); /* rates count training time only */
	}
	tb_epoch(epoch);
	R.ts.epoch = epoch + 1;
	R.ts.epoch_step = 0;
	control_epoch(epoch);
	/* the last epoch's too, unless it is -o, which finish() writes */
	int last = epoch + 1 >= C.epochs || ctl_stopped, own_path = O.ckpt && (!O.output || strcmp(O.ckpt, O.output));
	if (O.ckpt_every && O.ckpt_epochs && (epoch + 1) % O.ckpt_every == 0 && (!last || own_path)) {
		double t0 = dp_now();
		save(R.ckpt_path, &R.ts);
		not_training(t0);
	}
}

/* ---- after an epoch (rank 0): histograms, --on-epoch -------------------------------------- */

/* --on-epoch CMD, its placeholders filled in shell-quoted, the training
 * waiting for it. */
static void run_on_epoch(uint64_t epoch)
{
	char eb[24];
	snprintf(eb, sizeof eb, "%" PRIu64, epoch);
	const char *ck = last_ckpt ? last_ckpt : "", *tb = O.tensorboard ? O.tensorboard : "";
	dp_buf b[5] = {DP_BUF_INIT, DP_BUF_INIT, DP_BUF_INIT, DP_BUF_INIT, DP_BUF_INIT};
	dp_shell_quote(&b[0], ck);
	dp_shell_quote(&b[1], tb);
	dp_buf_printf(&b[2], "DP_EPOCH=%s", eb);
	dp_buf_printf(&b[3], "DP_CHECKPOINT=%s", ck);
	dp_buf_printf(&b[4], "DP_TENSORBOARD=%s", tb);
	for (int i = 0; i < 5; i++)
		if (b[i].err)
			cli_die("out of memory");
	const char *vars[] = {"epoch", eb, "checkpoint", b[0].p, "tensorboard", b[1].p, NULL};
	const char *env[] = {b[2].p, b[3].p, b[4].p, NULL};
	char *cmd = cli_expand(O.on_epoch, vars);
	cli_progress_clear();
	fflush(stdout);
	dp_err e;
	if (dp_shell_run(cmd, env, STDERR_FILENO, NULL, &e) < 0) {
		if (O.on_epoch_fail)
			cli_die("--on-epoch: epoch %" PRIu64 ": command %s; stopping (--on-epoch-fail)",
				epoch, e.msg);
		cli_warn("--on-epoch: epoch %" PRIu64 ": command %s", epoch, e.msg);
	}
	free(cmd);
	for (int i = 0; i < 5; i++)
		dp_buf_free(&b[i]);
}

/* After epoch (from 1) ended and its checkpoint and events are written:
 * once an epoch, rank 0 alone (the others wait at their next collective). */
static void after_epoch(uint64_t epoch)
{
	static uint64_t done;
	if (RANK != 0 || epoch == done)
		return;
	done = epoch;
	double t0 = dp_now();
	dp_err e;
	if (TB && O.tb_hist && dp_train_tb_histograms(TB, M, (int64_t)R.ts.step, &e) < 0)
		cli_die("--tensorboard: %s", e.msg);
	if (O.on_epoch)
		run_on_epoch(epoch);
	not_training(t0);
}

/* ---- finish ------------------------------------------------------------------------------ */

/* How the gradients' allreduce went, over the steps of the run. */
static void comm_report(void)
{
	for (int part = 0; part < 2 && R.iters; part++) {
		char *t = dp_train_comm_note(COMM, R.iter_time / (double)R.iters, O.wire, O.algo, part);
		if (t)
			note_text(t);
	}
}

/* The final checkpoint, the ranks checked against each other, the
 * timeline. */
static void finish(void)
{
	dp_err e;
	cli_progress_clear();
	if (R.ts.epoch >= C.epochs)
		R.ts.epoch_step = 0;
	/* the periodic series ends with the final state too (a --checkpoint of
	 * its own: 'ck-{step}' gets the last step, not only -o), then -o */
	int behind = R.ckpt_path && O.ckpt_every && last_ckpt_step != R.ts.step;
	int own = O.ckpt && (!O.output || strcmp(O.ckpt, O.output));
	if (behind && (own || !O.output))
		save(R.ckpt_path, &R.ts);
	if (O.output)
		save(O.output, &R.ts);
	else if (!behind)
		average_buffers();
	if (SIZE > 1) {
		check_same_state(R.ts.step);
		comm_report();
		char *pipe;
		if (dp_train_pipeline_report(TR, COMM, &pipe, &e) < 0)
			cli_die_err(CLI_FAIL, &e);
		if (pipe)
			note_text(pipe);
	}
	struct rusage ru;
	char pk[32];
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		note("peak memory: %s resident (rank %d)",
		     dp_fmt_size((uint64_t)ru.ru_maxrss * 1024, pk, sizeof pk), RANK);
	if (O.timeline && dp_comm_timeline_write(COMM, O.timeline, &e) < 0)
		cli_die("timeline: %s", e.msg);
}

/* Everything closed; the exit status. */
static int close_all(void)
{
	dp_trainer_free(TR);
	dp_eval_free(R.val);
	dp_data_close(TD);
	dp_data_close(VD);
	dp_optim_free(OPT);
	dp_model_free(M);
	dp_comm_close(COMM);
	COMM = NULL;
	R.be->close(R.ctx);
	free((char *)last_ckpt);
	free(O.train);
	free(O.val);
	dp_run_conf_free(&C);
	if (logfp && logfp != stdout && fclose(logfp) != 0)
		cli_die("%s: %s", O.log, strerror(errno));
	return cli_close_stdout() < 0 ? CLI_FAIL : CLI_OK;
}

int main(int argc, char **argv)
{
	cli_blas_kernels(argv); /* OpenBLAS's kernels for this CPU */
	cli.prog = DP_PROG;
	cli.usage = usage_line;
	cli.before_msg = before_msg;
	cli.on_fail = end_job;
	dp_out_install_signal_cleanup();
	if (dp_comm_launched()) { /* who we are, for messages before MPI is up */
		int r = -1, z = -1;
		dp_rank_size(&r, &z);
		set_rank(r, z);
	}
	sm_train_args(&argc, &argv, longopts); /* --sagemaker: the job's files as options */
	tb_argc = argc, tb_argv = argv;
	dp_run_conf_init(&C);
	parse_args(argc, argv);
	if (O.resume && O.init)
		cli_job_usage_error("--resume and --init exclude each other");
	if (O.reset && !O.init)
		cli_job_usage_error("--reset needs --init (the weights it leaves out)");
	if (O.in.max_skipped && !O.in.skip_corrupt)
		cli_job_usage_error("--max-skipped needs --skip-corrupt (without it nothing is skipped)");
	if (!O.in.max_skipped) {
		dp_err e;
		dp_gate_max_skipped(DP_MAX_SKIPPED_DEFAULT, &O.in.skip_gate, &e);
	}

	/* set-up: the job, the settings (some from a checkpoint), the model,
	 * the log, the weights, the data */
	join_job();
	check_same_settings(); /* as given: before the first collective of a checkpoint */
	start_from_checkpoint();
	if (R.ck)
		check_same_settings(); /* as completed from it */
	int from_file = C.model && C.model[0] == '@';
	make_model();
	if (from_file)
		check_same_settings(); /* the spec read, not the file's name */
	if (O.summary)
		return show_summary();
	check_ckpt_model();
	check_options();
	control_setup();
	each_output(check_output); /* a run that could only fail at its end fails now */
	check_distinct_outputs();
	setup_model();
	setup_data();
	check_outputs_not_inputs();
	open_log();
	tb_open();

	/* the epochs */
	for (uint64_t epoch = R.ts.epoch; epoch < C.epochs && !ctl_stopped; epoch++) {
		if (train_epoch(epoch))
			break; /* --max-steps */
		end_epoch(epoch);
		if (epoch + 1 < C.epochs && !ctl_stopped)
			after_epoch(epoch + 1);
	}

	finish();
	dp_err e;
	if (TB && dp_tb_run_end(TB, 1, &e) < 0) /* before the last --on-epoch sends the files */
		cli_die("--tensorboard: %s", e.msg);
	after_epoch(R.ts.epoch + (R.ts.epoch_step > 0)); /* the last epoch, after -o */
	tb_close();
	cli_exit(close_all()); /* a failure by way of cli_exit: cli.failure_file */
}
