/*
 * dp_onnx.h - a dp-train checkpoint's model as an ONNX file, for the
 * runtimes people deploy with (ONNX Runtime, TensorRT, OpenVINO, Triton).
 *
 * The file (ONNX IR version 7, the default domain's opset 13, written by
 * protobuf-c from ONNX's own onnx.proto, as libonnx-dev installs it):
 *   input "input"    float32 (batch, C, H, W), or (batch, H, W, C) for a
 *                    checkpoint whose raw arrays are channels-last
 *                    (layout hwc), or (batch, L) for a vector model; the
 *                    batch axis is dynamic (dim_param "batch").  The
 *                    values are the feature's as a record holds them,
 *                    BEFORE the checkpoint's --scale, --mean and --std:
 *                    raw uint8 bytes as 0..255, an image's pixels
 *                    0..255 after the resize and center crop of
 *                    dp_image_tf_eval (which the graph cannot do: the
 *                    metadata says which).  The graph starts with that
 *                    scaling, as dp_data does it: x * scale, or for
 *                    images x * (scale/std[c]) + (-mean[c]/std[c]), in
 *                    float32.  One choice for every consumer: the file
 *                    takes what dp-serve and the records take.
 *   nodes            one ONNX operator per spec item: Gemm (dense,
 *                    transB), Conv, MaxPool, AveragePool,
 *                    GlobalAveragePool, Flatten, BatchNormalization
 *                    (inference form: the running statistics), Relu,
 *                    Tanh, Sigmoid, Add (residual sums, then a block's
 *                    own activation); dropout is left out (inference),
 *                    and so is a final softmax item (the outputs below).
 *   outputs          a classifier: "logits" (batch, K) and
 *                    "probabilities" (batch, K), their softmax; a
 *                    regression model: "output" (batch, K).
 *   initializers     the weights and running statistics under the
 *                    checkpoint's own tensor names ("layer1.0.conv1.weight").
 *   metadata_props   "classes" (a JSON array of the class names, when
 *                    given), "model", "input_shape", "loss", "decode",
 *                    "layout", "scale", "image" (dp_image_spec: the
 *                    resize and crop to apply first), "step", "source".
 */
#ifndef DP_ONNX_H
#define DP_ONNX_H

#include "dp.h"
#include "dp_ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DP_ONNX_OPSET 13
#define DP_ONNX_IR_VERSION 7

typedef struct dp_onnx_opts {
	const char *const *classes; /* nclasses names (the model's classes), or NULL */
	size_t nclasses;
	const char *name;           /* the graph's name; NULL: the checkpoint's file name */
} dp_onnx_opts;

/* The ONNX model of checkpoint ck (dp_st_open'd), encoded into a new
 * buffer *out (free() it) of *len bytes.  DP_EDATA naming the checkpoint
 * when it is not a dp-train checkpoint, DP_EARG when the class names do
 * not match the model's outputs. */
DP_EXPORT int dp_onnx_encode(const dp_st *ck, const dp_onnx_opts *o, uint8_t **out, size_t *len,
			     dp_err *e);
/* The same written to path, whole or not at all (dp_out; "-": stdout). */
DP_EXPORT int dp_onnx_write(const dp_st *ck, const dp_onnx_opts *o, const char *path, dp_err *e);

#ifdef __cplusplus
}
#endif
#endif
