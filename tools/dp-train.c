/*
 * dp-train - train a neural network from TFRecord files of tf.train.Example.
 *
 * This file is the command line around libdp: options, messages and the
 * training loop.  The model (dp_nn.h), the math (dp_backend.h), the
 * optimizers (dp_optim.h), the input pipeline (dp_data.h), the checkpoints
 * (dp_ckpt.h), the talk between workers (dp_comm.h) and the step itself
 * (dp_train.h) are all in the library.  A step is: the next batch and the
 * ranks' sample counts (dp_run_next), then dp_run_step: forward, loss,
 * backward with each layer's gradients summed over the ranks as they are
 * ready, optimizer update (with --accumulate, --freeze and --sync-bn:
 * lib/train/step.c).  Under mpirun every rank runs this same loop in
 * lockstep; rank 0 alone logs and writes checkpoints.  Validation is
 * dp-eval's pass (dp_eval.h).  See dp-train(1) (DISTRIBUTED) and
 * dp-checkpoint(5).
 *
 * The run itself is one object of lib/train (dp_run, dp_train.h), which
 * the options fill in: its set-up (setup.c, outputs.c), the bookkeeping
 * of its epochs (epoch.c, epoch_end.c), its log (log.c), its checkpoints
 * (save.c); what the ranks agree on (agree.c), the data options of the
 * settings (data.c), a checkpoint resumed (resume.c), the run in words
 * (summary.c) and TensorBoard's files (tensorboard.c).  Each failure says
 * its kind (dp_run_fail); this file says it, and the notes.
 *
 * The file reads: options, messages, the pieces of the run (TensorBoard,
 * logs, checkpoints), set-up, the epochs and the finish, which main calls
 * in that order.
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

/* The run (dp_train.h): the options that set it up, then what the set-up
 * makes (the backend, the job, the model, the optimizer, the trainer, the
 * data); global, so that they stay reachable when a message ends the
 * program (exit does not free them; leak checkers should not count them). */
static dp_run R = {
	.c = &C,
	.shard = -1,
	.overlap = 1,
	.bucket = 1u << 20,
	.stall = 60,
	.prefetch = 2,
	.threads = 0, /* the host's CPUs shared by its ranks (dp_default_threads) */
	.gpu = -1,
	.log_every = 100,
	.stages = 1,
	.size = 1,
	.reps = 1,
};

/* Where the loop is (the model, optimizer and data are R's). */
static struct {
	const char *ckpt_path;    /* where --checkpoint-every saves */
	uint64_t steps_per_epoch; /* known after an epoch (the progress bar) */
} L;

/* The options of the tool itself. */
static struct {
	/* the input's options; those of the run's settings go to C
	 * (input_options) */
	struct cli_input in;
	int progress; /* -1 auto */
	int quiet;
	const char *tensorboard, *on_epoch; /* --tensorboard DIR, --on-epoch CMD */
	int tb_hist, on_epoch_fail;
	char given[O_LAST]; /* options given on the command line */
} O = {
	.progress = -1,
};

static void given_keys(void);

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
	"      --decode-threads N   threads decoding beside the reader (default 0; on a GPU\n"
	"                           its share of the CPUs less 2, at most 8)\n"
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

/* Who we are in the job (R.rank of R.size, from the launcher's
 * environment until the job is joined): the rank's messages say so
 * (cli_set_rank). */
static void set_rank(int rank, int size)
{
	R.rank = rank;
	R.size = size;
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
	if (R.comm && R.size > 1) {
		for (int i = 0; cli.quiet && R.rank != 0 && i < 300; i++) {
			struct timespec ts = {0, 100000000};
			nanosleep(&ts, NULL);
		}
		/* the message is in the pipe to mpirun's daemon; the abort kills
		 * the job at once, and under load mpirun then sometimes drops
		 * what it had not forwarded yet: give it a moment */
		struct timespec ts = {1, 0};
		fflush(stderr);
		nanosleep(&ts, NULL);
		dp_comm_abort(R.comm, code);
	}
}

/* A note of the job (rank 0's), unless --quiet. */
static void __attribute__((format(printf, 1, 2))) note(const char *fmt, ...)
{
	if (O.quiet || R.rank != 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	cli_job_says();
	cli_vwarn(fmt, ap);
	cli_set_rank(R.rank, R.size);
	va_end(ap);
}

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

static volatile uint64_t cur_step; /* for stall reports, from the communication thread */

static void stall_report(void *ctx, const char *msg)
{
	fprintf(stderr, "%s: rank %d: step %" PRIu64 ": %s\n", cli.prog, R.rank,
		__atomic_load_n(&cur_step, __ATOMIC_RELAXED) + 1, msg);
}

/* A failure of the run (dp_train.h), said as its kind says (dp_run_fail). */
static void __attribute__((noreturn)) run_die(const dp_err *e)
{
	if (R.fail == DP_RUN_FAIL_USAGE)
		cli_job_usage_error("%s", e->msg);
	if (R.fail == DP_RUN_FAIL_JOB || R.fail == DP_RUN_FAIL_SETTINGS)
		die_all(R.fail == DP_RUN_FAIL_JOB ? CLI_FAIL : CLI_USAGE, "%s", e->msg);
	cli_die_err(CLI_FAIL, e);
}

/* A call of the run done, or the run ends. */
static void run_ok(int rc, const dp_err *e)
{
	if (rc < 0)
		run_die(e);
}

/* The set-up's notes (rank 0's). */
static void run_note(void *ctx, const char *msg)
{
	note("%s", msg);
}

/* --checkpoint-every N (updates) or Ne (epochs). */
static void parse_ckpt_every(const char *arg)
{
	size_t l = strlen(arg);
	char buf[32];
	dp_err e;
	R.ckpt_epochs = l > 1 && l < sizeof buf && arg[l - 1] == 'e';
	snprintf(buf, sizeof buf, "%.*s", (int)(l - (size_t)R.ckpt_epochs), arg);
	if (dp_parse_count("--checkpoint-every", buf, 1, UINT64_MAX / 2, &R.ckpt_every, &e) < 0)
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
	case O_TRAIN: cli_push(&R.train, &R.ntrain, arg); break;
	case O_TRAIN_CMD: R.train_cmd = arg; break;
	case O_VAL: cli_push(&R.val, &R.nval, arg); break;
	case O_VAL_CMD: R.val_cmd = arg; break;
	case O_SHUFFLE: C.shuffle = cli_count("--shuffle-buffer", arg, 0, 1u << 28); break;
	case O_LAST_BATCH:
		if (strcmp(arg, "keep") && strcmp(arg, "drop"))
			cli_job_usage_error("--last-batch '%s': want keep or drop", arg);
		C.drop_last = !strcmp(arg, "drop");
		break;
	case O_CACHE:
		R.cache = !strcmp(arg, "file")     ? DP_CACHE_FILE
			  : !strcmp(arg, "memory") ? DP_CACHE_MEMORY
			  : !strcmp(arg, "none")   ? DP_CACHE_NONE
						      : -1;
		if (R.cache < 0)
			cli_job_usage_error("--cache '%s': want file, memory or none", arg);
		break;
	case O_CACHE_LIMIT:
		if (dp_parse_size(arg, &R.cache_limit) < 0)
			cli_job_usage_error("--cache-limit '%s': want a size such as 512M or 8G", arg);
		if (!R.cache_limit)
			cli_job_usage_error("--cache-limit '%s': want more than 0 bytes (--cache none "
				    "keeps nothing)",
				    arg);
		break;
	case O_CACHE_DIR: R.cache_dir = arg; break;
	case O_PREFETCH: R.prefetch = (int)cli_count("--prefetch", arg, 0, 64); break;
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
	case O_SHARD_DATA: R.shard = 1; break;
	case O_NO_SHARD_DATA: R.shard = 0; break;
	case O_UNEVEN:
		if (strcmp(arg, "join") && strcmp(arg, "drop"))
			cli_job_usage_error("--uneven '%s': want join or drop", arg);
		R.uneven_drop = !strcmp(arg, "drop");
		break;
	case O_SCALE_LR: C.scale_lr = 1; break;
	case O_WARMUP_EPOCHS: C.warmup_epochs = cli_real("--warmup-epochs", arg, 0, 1e6); break;
	case O_STEPS_PER_EPOCH:
		C.steps_per_epoch = cli_count("--steps-per-epoch", arg, 1, UINT64_MAX / 4);
		break;
	case O_NO_OVERLAP: R.overlap = 0; break;
	case O_ACCUMULATE: C.accumulate = cli_count("--accumulate", arg, 1, 1u << 16); break;
	case O_CLIP_NORM: C.clip_norm = cli_real("--clip-norm", arg, 1e-30, 1e30); break;
	case O_BUCKET:
		R.bucket = cli_size("--bucket-size", arg, 1, 1ull << 40);
		break;
	case O_GRAD_DTYPE:
		if ((R.wire = dp_comm_wire_parse(arg)) < 0)
			cli_job_usage_error("--grad-dtype '%s': want fp32, bf16 or fp16", arg);
		break;
	case O_ALLREDUCE:
		if ((R.algo = dp_comm_algo_parse(arg)) < 0)
			cli_job_usage_error("--allreduce '%s': want ring, hierarchical or mpi", arg);
		break;
	case O_LOG_ALL: R.log_all = 1; break;
	case O_TIMELINE: R.timeline = arg; break;
	case O_STALL: R.stall = cli_real("--stall-timeout", arg, 0, 1e7); break;
	case O_STALL_ABORT: R.stall_abort = cli_real("--stall-abort", arg, 0, 1e7); break;
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

/* --classes N (a named model's outputs) or NAMES (as many outputs, and
 * the names kept in the checkpoint's metadata). */
static void classes_opt(const char *v)
{
	dp_err e;
	if (strspn(v, "0123456789") == strlen(v)) {
		R.classes = (int)cli_count("--classes", v, 2, 1 << 24);
		return;
	}
	R.nnames = 0;
	free(R.names);
	if (dp_classes_parse(v, &R.nnames, &R.names, &e) < 0)
		cli_job_usage_error("--classes: %s", e.msg);
	if (R.nnames < 2)
		cli_job_usage_error("--classes: %zu name: a classifier has 2 classes or more", R.nnames);
	R.classes = (int)R.nnames;
	free(R.classes_json);
	if (!(R.classes_json = dp_classes_json((const char *const *)R.names, R.nnames)))
		cli_die("out of memory");
	C.classes = R.classes_json;
	C.given[DP_RUN_CLASSES] = 1;
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
		case O_SUMMARY: R.summary = 1; break;
		case O_RECOMPUTE: R.recompute = optarg ? optarg : ""; break;
		case O_PIPE_STAGES:
			R.stages = (int)cli_count("--pipeline-stages", optarg, 1, DP_MAX_STAGES);
			break;
		case O_MICRO: R.micro = cli_count("--micro-batches", optarg, 1, 1u << 20); break;
		case O_PIPE_SCHED:
			if ((R.schedule = dp_pipe_schedule_parse(optarg)) < 0)
				cli_job_usage_error("--pipeline-schedule '%s': want 1f1b or gpipe", optarg);
			break;
		case O_MEMORY_LIMIT:
			if (dp_parse_size(optarg, &R.mem_limit) < 0 || !R.mem_limit)
				cli_job_usage_error("--memory-limit '%s': want a size such as 512M or 8G", optarg);
			break;
		case O_EPOCHS: C.epochs = cli_count("--epochs", optarg, 1, 1u << 30); break;
		case O_MAX_STEPS: R.max_steps = cli_count("--max-steps", optarg, 1, UINT64_MAX / 2); break;
		case O_BATCH: C.batch = cli_count("--batch-size", optarg, 1, 1u << 20); break;
		case O_SEED: C.seed = cli_count("--seed", optarg, 0, UINT64_MAX); break;
		case O_THREADS: R.threads = (int)cli_count("--threads", optarg, 1, 256); break;
		case O_GPU: R.gpu = (int)cli_count("--gpu", optarg, 0, 4096); break;
		case O_DETERMINISTIC: R.deterministic = 1; break;
		case O_PRECISION:
			if ((C.precision = dp_precision_parse(optarg)) < 0)
				cli_job_usage_error("--precision '%s': want fp32, tf32 or bf16", optarg);
			break;
		case O_CKPT_EVERY: parse_ckpt_every(optarg); break;
		case O_CKPT: R.ckpt = optarg; break;
		case O_RESUME: R.resume = optarg; break;
		case O_INIT: R.init = optarg; break;
		case O_RESET: R.reset = optarg; break;
		case O_FREEZE: C.freeze = optarg; break;
		case O_LR_MULT: C.lr_mult = optarg; break;
		case O_NO_DECAY: C.no_decay = optarg; break;
		case O_SMOOTH: C.smooth = cli_real("--label-smoothing", optarg, 0, 1); break;
		case 'o': R.output = optarg; break;
		case O_LOG_FORMAT:
			if (strcmp(optarg, "logfmt") && strcmp(optarg, "json"))
				cli_job_usage_error("--log-format '%s': want logfmt or json", optarg);
			R.json = !strcmp(optarg, "json");
			break;
		case O_LOG: R.log = optarg; break;
		case O_LOG_EVERY: R.log_every = cli_count("--log-every", optarg, 1, UINT64_MAX / 2); break;
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
		case O_SAVE_BEST: R.save_best = optarg; break;
		default:
			if (!data_option(c, optarg, li) && !dist_option(c, optarg) &&
			    !optim_option(c, optarg))
				cli_default_option(c, argv, help);
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
	given_keys();
	cli_set_rank(R.rank, R.size);
}

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

/* The keys the command line gave, which a checkpoint's do not replace
 * (dp_run_start_from), so that `--resume ck` alone continues the same run;
 * the options the run's set-up reads beside them. */
static void given_keys(void)
{
	for (size_t i = 0; i < sizeof opt_keys / sizeof opt_keys[0]; i++)
		C.given[opt_keys[i].key] = O.given[opt_keys[i].opt];
	C.given[DP_RUN_FEATURE] = O.in.feature != NULL;
	C.given[DP_RUN_LABEL] = O.in.label != NULL;
	C.given[DP_RUN_DECODE] = O.in.decode >= 0;
	C.given[DP_RUN_IMAGE] = O.in.img_text != NULL;
	C.given[DP_RUN_LAYOUT] = O.in.hwc >= 0;
	C.given[DP_RUN_SCALE] = O.in.scale_text != NULL;
	R.model_given = O.given[O_MODEL] || O.given[O_INPUT_SHAPE];
	R.cache_given = O.given[O_CACHE];
	R.steps_given = O.given[O_STEPS_PER_EPOCH];
	R.pipe_opt = O.given[O_MICRO] ? "micro-batches" : O.given[O_PIPE_SCHED] ? "pipeline-schedule" : NULL;
	R.decode_threads = O.in.decode_threads;
	R.decode_given = O.in.decode_given;
	R.skip_corrupt = O.in.skip_corrupt;
	R.max_record = O.in.max_record;
	R.max_skipped = O.in.max_skipped;
}

/* ---- TensorBoard (rank 0) ------------------------------------------------------ */

static char **tb_argv;     /* the command line, for its settings */
static int tb_argc;

/* The run folder, its settings first: the hparams and the command line. */
static void tb_open(void)
{
	dp_err e;
	if (!O.tensorboard || R.rank != 0)
		return;
	C.ranks = R.size;
	if (!(R.tb = dp_train_tb_open(O.tensorboard, DP_PROG, tb_argc, tb_argv, &C, &e)))
		cli_die("--tensorboard: %s", e.msg);
}

static void tb_close(void)
{
	dp_err e;
	if (dp_tb_run_close(R.tb, &e) < 0)
		cli_die("--tensorboard: %s", e.msg);
	R.tb = NULL;
}

/* ---- logs ---------------------------------------------------------------------- */

/* The training line of the last steps: this rank's (--log-all-ranks),
 * then the job's, summed over the ranks (a collective: every rank calls
 * it at the same steps). */
static void log_train(uint64_t epoch)
{
	dp_err e;
	run_ok(dp_run_log_train(&R, epoch, &e), &e);
}

static void bar_draw(uint64_t epoch, uint64_t done, uint64_t total, const dp_run_meter *mt)
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
	char rate[DP_DOUBLE_BUF];
	if (mt->samples)
		snprintf(line + n, sizeof line - (size_t)n, "  loss %.4f  %s samples/s",
			 mt->loss / (double)mt->samples,
			 dp_fmt_rate((double)mt->samples / fmax(1e-9, now - mt->t0), rate, sizeof rate));
	cli_progress("%s", line);
}

/* ---- checkpoints ---------------------------------------------------------------- */

static const char *last_ckpt;
static uint64_t last_ckpt_step;
static int have_ckpt;

/* Every rank's running statistics (batchnorm) become their mean: each
 * rank's were updated from its own batches. */
static void average_buffers(void)
{
	dp_err e;
	if (dp_trainer_average_buffers(R.tr, &e) < 0)
		cli_die("batchnorm statistics: %s", e.msg);
}

/* A checkpoint: called by every rank at the same step; rank 0 writes. */
static void save(const char *tmpl)
{
	dp_err e;
	char *path;
	if (dp_run_save(&R, tmpl, "dp-train", &path, &e) < 0) {
		if (e.code == DP_EDATA)
			cli_die_code(TRAIN_DIVERGED, "step %" PRIu64 ": %s%s%s", R.ts.step, e.msg,
				     have_ckpt ? "; the last good checkpoint is " : "",
				     have_ckpt ? last_ckpt : "");
		cli_die_err(CLI_FAIL, &e);
	}
	free((char *)last_ckpt);
	last_ckpt = path;
	last_ckpt_step = R.ts.step;
	have_ckpt = 1;
}

/* ---- set-up (dp_train.h: lib/train/setup.c, outputs.c) ------------------------------ */

/* --summary: the layers, the pipeline's cut, what runs each convolution
 * layer at --batch-size and why (the backend times them now, as the run
 * would, unless --deterministic or a checkpoint's choices say); the end
 * of the run. */
static int show_summary(void)
{
	dp_err e;
	run_ok(dp_run_summary_model(&R, &e), &e);
	if (R.rank == 0)
		print_text(dp_train_summary(R.m, C.batch));
	dp_step_conf sc = dp_run_step_conf(&R);
	char *text = R.rank == 0 && R.stages > 1 ? dp_train_summary_pipeline(R.m, &sc, &e) : NULL;
	if (R.rank == 0 && R.stages > 1 && !text && e.code == DP_EARG)
		cli_job_usage_error("--pipeline-stages %d: %s", R.stages, e.msg);
	if (R.rank == 0 && R.stages > 1)
		print_text(text);
	if (dp_train_summary_convs(R.m, R.be, R.ctx, C.batch, R.desc, &text, &e) < 0)
		cli_die_err(CLI_FAIL, &e);
	if (R.rank == 0)
		print_text(text);
	free(R.rank == 0 ? NULL : text);
	dp_run_close(&R);
	return cli_close_stdout() < 0 ? CLI_FAIL : CLI_OK;
}

/* The log: rank 0's, and with --log-all-ranks every rank's ({rank} in
 * --log: a file each; else the others write to their stdout). */
static void open_log(void)
{
	R.logfp = NULL;
	if (R.rank == 0 || R.log_all) {
		R.logfp = stdout;
		const char *lp = R.log;
		if (lp && R.rank != 0 && !dp_names_rank(lp))
			lp = NULL;
		if (lp && strcmp(lp, "-")) {
			char *own = dp_run_path(&R, lp);
			if (!own)
				cli_die("out of memory");
			if (!(R.logfp = fopen(own, R.resume ? "a" : "w")))
				cli_die("%s: %s", own, strerror(errno));
			free(own);
		}
	}
	cli_progress_on(R.rank == 0 &&
			(O.progress == 1 || (O.progress < 0 && !O.quiet && isatty(STDERR_FILENO))));
}

/* ---- the epochs (dp_train.h: lib/train/epoch.c) ---------------------------------------- */

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

/* One micro-batch s of update R.ts.step (s NULL: the update of the
 * micro-batches accumulated), begun at t0: 1 when it made the update. */
static int train_step(uint64_t epoch, const dp_step *s, double t0)
{
	dp_err e;
	double loss;
	__atomic_store_n(&cur_step, R.ts.step, __ATOMIC_RELAXED);
	int rc = dp_run_step(&R, epoch, s, t0, &loss, &e);
	if (rc < 0 && !isfinite(loss))
		diverged(epoch, loss);
	if (rc < 0)
		cli_die("%s", e.msg);
	return rc;
}

/* Time since t0 was not training (a checkpoint, --on-epoch, histograms):
 * left out of the next line's samples_per_sec, as validation is. */
static void not_training(double t0)
{
	R.mt.t0 += dp_now() - t0;
}

/* After an update: the training line, the checkpoint, the progress bar. */
static void after_update(uint64_t epoch)
{
	if (R.ts.step % R.log_every == 0)
		log_train(epoch);
	if (R.ckpt_every && !R.ckpt_epochs && R.ts.step % R.ckpt_every == 0) {
		double t0 = dp_now();
		save(L.ckpt_path);
		not_training(t0);
	}
	bar_draw(epoch, R.ts.epoch_step, L.steps_per_epoch, &R.mt);
}

/* The updates of one epoch (the rest of it, when resuming), its training
 * lines and checkpoints: 1 when --max-steps ends the run. */
static int train_epoch(uint64_t epoch)
{
	dp_err e;
	if (dp_run_epoch_begin(&R, epoch, &e) < 0)
		cli_die("%s", e.msg);
	uint64_t G = C.batch * (uint64_t)R.reps, short_steps = 0; /* a micro-batch's */
	int stopped = 0;
	for (;;) {
		if (R.max_steps && R.ts.step >= R.max_steps) {
			stopped = 1; /* before the step: a resumed run already there does none */
			break;
		}
		double t0;
		dp_step s;
		if (dp_run_next(&R, &s, &t0, &e) < 0)
			cli_die("%s", e.msg);
		if (!s.gn)
			break; /* the epoch is over everywhere */
		if (R.uneven_drop && s.nout) {
			note("epoch %" PRIu64 ", step %" PRIu64 ": rank %d ran out of data first: "
			     "the other ranks' remaining records (%" PRIu64 " in this step) are "
			     "dropped this epoch (--uneven drop)",
			     epoch + 1, R.ts.step + 1, s.first_out, s.gn);
			break;
		}
		if (R.reps > 1 && C.drop_last && s.gn < G) {
			note("epoch %" PRIu64 ": the last global batch (%" PRIu64 " of %" PRIu64
			     " samples) dropped (--last-batch drop)",
			     epoch + 1, s.gn, G);
			dp_step_drop(R.tr); /* with the update it belongs to */
			break;
		}
		short_steps += s.gn < G;
		if (train_step(epoch, &s, t0))
			after_update(epoch);
	}
	if (dp_step_pending(R.tr) && C.drop_last) { /* an update of fewer micro-batches at the end */
		dp_step_drop(R.tr);
	} else if (dp_step_pending(R.tr)) {
		train_step(epoch, NULL, dp_now());
		after_update(epoch);
	}
	if (short_steps > 1 && R.reps > 1 && !R.uneven_drop)
		note("epoch %" PRIu64 ": the ranks' data ran out at different steps: %" PRIu64
		     " steps had fewer than %" PRIu64 " samples, the ranks out of data "
		     "adding none (--uneven join)",
		     epoch + 1, short_steps, G);
	if (R.mt.steps)
		log_train(epoch);
	run_ok(dp_run_epoch_input(&R, epoch, stopped, &e), &e);
	return stopped;
}

/* ---- training control ------------------------------------------------------------------
 *
 * After validation: early stopping, the rate on a plateau and the best
 * epoch (dp_control_epoch), decided by every rank from the job's exact
 * validation sums (the same bits everywhere); each that fires says so in
 * the log (and TensorBoard: tb_line) and in a note. */

static void control_epoch(uint64_t epoch)
{
	dp_err e;
	double v;
	dp_control_result r;
	if (!R.ctl_on)
		return;
	run_ok(dp_run_control(&R, epoch, &v, &r, &e), &e);
	if (r.improved) {
		double t0 = dp_now();
		save(R.save_best);
		not_training(t0);
	}
	run_ok(dp_run_control_log(&R, epoch, v, &r, last_ckpt, &e), &e);
}

/* After an epoch's updates: validation, training control, and the
 * checkpoint of --checkpoint-every Ne. */
static void end_epoch(uint64_t epoch)
{
	dp_err e;
	if (R.ts.epoch_step == 0)
		die_all(1, "train: epoch %" PRIu64 " has no batches (no records%s)", epoch + 1,
			C.drop_last ? ", or fewer than a batch with --last-batch drop" : "");
	L.steps_per_epoch = R.ts.epoch_step;
	if (R.eval) {
		average_buffers();
		run_ok(dp_run_validate(&R, epoch, &e), &e);
		R.mt.t0 = dp_now(); /* rates count training time only */
	}
	run_ok(dp_run_log_epoch(&R, epoch, &e), &e);
	R.ts.epoch = epoch + 1;
	R.ts.epoch_step = 0;
	control_epoch(epoch);
	/* the last epoch's too, unless it is -o, which finish() writes */
	int last = epoch + 1 >= C.epochs || R.stopped, own_path = R.ckpt && (!R.output || strcmp(R.ckpt, R.output));
	if (R.ckpt_every && R.ckpt_epochs && (epoch + 1) % R.ckpt_every == 0 && (!last || own_path)) {
		double t0 = dp_now();
		save(L.ckpt_path);
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
	dp_shell_var vars[] = {{"epoch", eb, 0},
			       {"checkpoint", last_ckpt ? last_ckpt : "", 1},
			       {"tensorboard", O.tensorboard ? O.tensorboard : "", 1}};
	cli_progress_clear();
	fflush(stdout);
	dp_err e;
	if (dp_shell_run_vars(O.on_epoch, vars, 3, "DP_", STDERR_FILENO, NULL, &e) < 0) {
		if (O.on_epoch_fail)
			cli_die("--on-epoch: epoch %" PRIu64 ": command %s; stopping (--on-epoch-fail)",
				epoch, e.msg);
		cli_warn("--on-epoch: epoch %" PRIu64 ": command %s", epoch, e.msg);
	}
}

/* After epoch (from 1) ended and its checkpoint and events are written:
 * once an epoch, rank 0 alone (the others wait at their next collective). */
static void after_epoch(uint64_t epoch)
{
	static uint64_t done;
	if (R.rank != 0 || epoch == done)
		return;
	done = epoch;
	double t0 = dp_now();
	dp_err e;
	if (R.tb && O.tb_hist && dp_train_tb_histograms(R.tb, R.m, (int64_t)R.ts.step, &e) < 0)
		cli_die("--tensorboard: %s", e.msg);
	if (O.on_epoch)
		run_on_epoch(epoch);
	not_training(t0);
}

/* ---- finish ------------------------------------------------------------------------------ */

/* At the end: every rank must hold what rank 0 holds. */
static void check_same_state(void)
{
	char hb[17], *diff;
	dp_err e;
	run_ok(dp_run_log_state(&R, hb, &diff, &e), &e);
	for (char *l = diff, *nl; R.rank == 0 && l && (nl = strchr(l, '\n')); l = nl + 1)
		fprintf(stderr, "%s: %.*s\n", cli.prog, (int)(nl - l), l);
	if (diff)
		die_all(1, "the ranks ended out of step: a bug; please report it");
	if (R.stages > 1 && R.reps > 1)
		note("each stage's %d replicas hold the same weights and optimizer state", R.reps);
	else if (R.size > 1 && R.stages <= 1)
		note("all %d ranks hold the same weights and optimizer state (fnv1a64 %s)", R.size, hb);
}

/* How the gradients' allreduce went, over the steps of the run. */
static void comm_report(void)
{
	for (int part = 0; part < 2 && R.iters; part++) {
		char *t = dp_train_comm_note(R.comm, R.iter_time / (double)R.iters, R.wire, R.algo, part);
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
	int behind = L.ckpt_path && R.ckpt_every && last_ckpt_step != R.ts.step;
	int own = R.ckpt && (!R.output || strcmp(R.ckpt, R.output));
	if (behind && (own || !R.output))
		save(L.ckpt_path);
	if (R.output)
		save(R.output);
	else if (!behind)
		average_buffers();
	if (R.size > 1) {
		check_same_state();
		comm_report();
		char *pipe;
		if (dp_train_pipeline_report(R.tr, R.comm, &pipe, &e) < 0)
			cli_die_err(CLI_FAIL, &e);
		if (pipe)
			note_text(pipe);
	}
	struct rusage ru;
	char pk[32];
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		note("peak memory: %s resident (rank %d)",
		     dp_fmt_size((uint64_t)ru.ru_maxrss * 1024, pk, sizeof pk), R.rank);
	if (R.timeline && dp_comm_timeline_write(R.comm, R.timeline, &e) < 0)
		cli_die("timeline: %s", e.msg);
}

/* Everything closed; the exit status. */
static int close_all(void)
{
	dp_run_close(&R);
	free((char *)last_ckpt);
	free(R.train);
	free(R.val);
	free(R.names);
	dp_run_conf_free(&C);
	if (R.logfp && R.logfp != stdout && fclose(R.logfp) != 0)
		cli_die("%s: %s", R.log, strerror(errno));
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
	if (R.resume && R.init)
		cli_job_usage_error("--resume and --init exclude each other");
	if (R.reset && !R.init)
		cli_job_usage_error("--reset needs --init (the weights it leaves out)");
	if (O.in.max_skipped && !O.in.skip_corrupt)
		cli_job_usage_error("--max-skipped needs --skip-corrupt (without it nothing is skipped)");
	if (!O.in.max_skipped) {
		dp_err e;
		dp_gate_max_skipped(DP_MAX_SKIPPED_DEFAULT, &O.in.skip_gate, &e);
	}
	R.skip_gate = O.in.skip_gate;

	/* set-up: the job, the settings (some from a checkpoint), the model,
	 * the checks, the weights, the data, the log */
	dp_err e;
	R.stall_report = stall_report;
	R.on_skip = cli_input_skipped; /* an image skipped (--skip-corrupt) */
	R.note = run_note;
	R.before_line = cli_progress_clear;
	run_ok(dp_run_join(&R, &e), &e);
	set_rank(R.rank, R.size);
	/* every rank started alike: as given, before the first collective of
	 * a checkpoint; as completed from it; with the spec read, not the
	 * file's name */
	run_ok(dp_run_check_same(&R, &e), &e);
	run_ok(dp_run_start_from(&R, &e), &e);
	if (R.ck)
		run_ok(dp_run_check_same(&R, &e), &e);
	int from_file = C.model && C.model[0] == '@';
	run_ok(dp_run_model(&R, &e), &e);
	if (from_file)
		run_ok(dp_run_check_same(&R, &e), &e);
	if (R.summary)
		return show_summary();
	run_ok(dp_run_check(&R, &e), &e);
	run_ok(dp_run_check_outputs(&R, &e), &e); /* a run that could only fail at its end fails now */
	run_ok(dp_run_setup(&R, &e), &e);
	run_ok(dp_run_check_inputs(&R, &e), &e);
	L.ckpt_path = R.ckpt ? R.ckpt : R.output;
	R.mt.t0 = dp_now();
	open_log();
	tb_open();

	/* the epochs */
	for (uint64_t epoch = R.ts.epoch; epoch < C.epochs && !R.stopped; epoch++) {
		if (train_epoch(epoch))
			break; /* --max-steps */
		end_epoch(epoch);
		if (epoch + 1 < C.epochs && !R.stopped)
			after_epoch(epoch + 1);
	}

	finish();
	if (R.tb && dp_tb_run_end(R.tb, 1, &e) < 0) /* before the last --on-epoch sends the files */
		cli_die("--tensorboard: %s", e.msg);
	after_epoch(R.ts.epoch + (R.ts.epoch_step > 0)); /* the last epoch, after -o */
	tb_close();
	cli_exit(close_all()); /* a failure by way of cli_exit: cli.failure_file */
}
