/*
 * data.c - a run's data as its settings say (dp_train.h, "the run's
 * data"): the input pipeline's options (dp_data_opts) of a dp_run_conf
 * and the model it feeds, for training or validation, and the updates an
 * epoch holds, counted by reading it once without decoding (the ramp of
 * --warmup-epochs needs them before the first epoch), and the class
 * names the training records gave, for the checkpoints.
 *
 * What is the caller's: the sources, the sharding between ranks, the
 * cache, threads and memory (dp_data_opts' other fields).
 */
#define _GNU_SOURCE
#include "train_impl.h"

#include <stdlib.h>

void dp_run_data_opts(const dp_run_conf *c, const dp_model *m, const dp_shape *in, int train,
		      dp_data_opts *o)
{
	o->feature = c->feature;
	o->label = c->label;
	o->decode = c->decode;
	o->scale = c->scale;
	o->in_size = dp_model_in_size(m);
	o->label_kind = dp_model_loss_kind(m) == DP_LOSS_XENT ? DP_LABEL_CLASS : DP_LABEL_VECTOR;
	o->nclass = o->label_size = dp_model_out_size(m);
	o->batch = c->batch;
	o->drop_last = train ? c->drop_last : 0;
	o->shuffle = train ? c->shuffle : 0;
	o->seed = c->seed;
	o->shape[0] = (size_t)in->c;
	o->shape[1] = (size_t)in->h;
	o->shape[2] = (size_t)in->w;
	o->hwc = c->hwc;
	if (train)
		o->image = c->img;
	else
		dp_image_tf_eval(&c->img, &o->image);
	/* images name their class (image/class/text): the names travel in the
	 * checkpoint unless the settings gave them */
	if (train && dp_model_loss_kind(m) == DP_LOSS_XENT && c->decode == DP_DECODE_IMAGE &&
	    !c->classes)
		o->class_text = "image/class/text";
}

int dp_trainer_count_steps(dp_trainer *t, dp_comm *c, dp_data *td, const dp_run_conf *rc,
			   int take_min, uint64_t *steps, dp_err *e)
{
	uint64_t mine = 0;
	if (td) { /* a pipeline's later stages read nothing */
		if (dp_data_epoch(td, 0, UINT64_MAX / 2, e) < 0)
			return -1;
		const dp_batch *b;
		int rc2;
		while ((rc2 = dp_data_next(td, &b, e)) == 1)
			;
		if (rc2 < 0)
			return -1;
		dp_data_stats st;
		dp_data_stats_get(td, &st);
		uint64_t own = st.records - st.not_in_shard, bs = rc->batch;
		mine = rc->drop_last ? own / bs : (own + bs - 1) / bs;
	}
	int size = dp_comm_size(c), every = size / dp_trainer_replicas(t, NULL);
	uint64_t *all = train_allgather(c, &mine, sizeof mine, e);
	if (!all)
		return -1;
	uint64_t n = all[0];
	take_min |= rc->drop_last;
	for (int r = every; r < size; r += every) /* each replica's first stage */
		n = take_min ? (all[r] < n ? all[r] : n) : (all[r] > n ? all[r] : n);
	free(all);
	*steps = rc->drop_last ? n / rc->accumulate : (n + rc->accumulate - 1) / rc->accumulate;
	return 0;
}

char *dp_run_data_classes(dp_data *td)
{
	const char *const *names;
	size_t k = td ? dp_data_class_names(td, &names) : 0, n;
	if (!k)
		return NULL;
	char **back;
	dp_err e;
	char *json = dp_classes_json(names, k);
	if (json && dp_classes_from_json(json, &n, &back, &e) == 0) { /* distinct */
		free(back);
		return json;
	}
	free(json);
	return NULL;
}
