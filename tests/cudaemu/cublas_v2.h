/* tests/cudaemu/cublas_v2.h - the cuBLAS calls of lib/backend_cuda.cu on
 * OpenBLAS, for the CPU emulation (see cuda_runtime.h).  Column-major with
 * cuBLAS's argument order, which CBLAS shares (CblasColMajor); its checks
 * of the leading dimensions are cuBLAS's, so a wrong ld fails here too.
 * bf16 operands are widened to float (exactly) first. */
#ifndef CUDAEMU_CUBLAS_H
#define CUDAEMU_CUBLAS_H

#include "cuda_bf16.h"
#include "cuda_runtime.h"

#include <cblas.h>

typedef struct emu_blas *cublasHandle_t;
typedef int cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

static inline cublasStatus_t cublasCreate(cublasHandle_t *h)
{
	*h = (cublasHandle_t)malloc(1);
	return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasDestroy(cublasHandle_t h) { free(h); return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { return 0; }
static inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { return 0; }
static inline cublasStatus_t cublasGetVersion(cublasHandle_t h, int *v) { *v = 130000; return 0; }
static inline const char *cublasGetStatusString(cublasStatus_t s)
{
	return s ? "CUBLAS_STATUS_INVALID_VALUE" : "CUBLAS_STATUS_SUCCESS";
}

/* The arguments cuBLAS would refuse. */
static inline int emu_gemm_bad(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			       int lda, int ldb, int ldc)
{
	int ra = ta == CUBLAS_OP_N ? m : k, rb = tb == CUBLAS_OP_N ? k : n;
	return m < 0 || n < 0 || k < 0 || lda < (ra > 1 ? ra : 1) || ldb < (rb > 1 ? rb : 1) ||
	       ldc < (m > 1 ? m : 1);
}

static inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta,
					 cublasOperation_t tb, int m, int n, int k, const float *alpha,
					 const float *A, int lda, const float *B, int ldb,
					 const float *beta, float *C, int ldc)
{
	if (emu_gemm_bad(ta, tb, m, n, k, lda, ldb, ldc))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0)
		return 0;
	if (k == 0) { /* C = beta C; BLAS leaves it too */
		for (int j = 0; j < n; j++)
			for (int i = 0; i < m; i++)
				C[(size_t)j * ldc + i] = *beta == 0 ? 0 : *beta * C[(size_t)j * ldc + i];
		return 0;
	}
	if (*beta == 0) /* cuBLAS ignores C when beta is 0 (it may hold NaN) */
		for (int j = 0; j < n; j++)
			memset(C + (size_t)j * ldc, 0, (size_t)m * sizeof *C);
	cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
		    tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, *alpha, A, lda, B, ldb,
		    *beta, C, ldc);
	return 0;
}

/* Float copy of the part of a bf16 matrix that a GEMM reads. */
static inline float *emu_widen(const void *p, cublasOperation_t t, int rows, int cols, int ld)
{
	int r = t == CUBLAS_OP_N ? rows : cols, c = t == CUBLAS_OP_N ? cols : rows;
	size_t n = c ? (size_t)ld * (c - 1) + r : 0;
	float *f = (float *)malloc((n ? n : 1) * sizeof *f);
	const __nv_bfloat16 *b = (const __nv_bfloat16 *)p;
	for (size_t i = 0; i < n; i++)
		f[i] = __bfloat162float(b[i]);
	return f;
}

static inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
					  cublasOperation_t tb, int m, int n, int k, const void *alpha,
					  const void *A, cudaDataType at, int lda, const void *B,
					  cudaDataType bt, int ldb, const void *beta, void *C,
					  cudaDataType ct, int ldc, cublasComputeType_t comp,
					  cublasGemmAlgo_t algo)
{
	if (at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (emu_gemm_bad(ta, tb, m, n, k, lda, ldb, ldc))
		return CUBLAS_STATUS_INVALID_VALUE;
	float *a = emu_widen(A, ta, m, k, lda), *b = emu_widen(B, tb, k, n, ldb);
	cublasStatus_t r = cublasSgemm(h, ta, tb, m, n, k, (const float *)alpha, a, lda, b, ldb,
				       (const float *)beta, (float *)C, ldc);
	free(a);
	free(b);
	return r;
}

static inline cublasStatus_t cublasSgemmStridedBatched(
	cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
	const float *alpha, const float *A, int lda, long long sa, const float *B, int ldb,
	long long sb, const float *beta, float *C, int ldc, long long sc, int count)
{
	for (int i = 0; i < count; i++) {
		cublasStatus_t r = cublasSgemm(h, ta, tb, m, n, k, alpha, A + i * sa, lda, B + i * sb,
					       ldb, beta, C + i * sc, ldc);
		if (r)
			return r;
	}
	return 0;
}

static inline cublasStatus_t cublasGemmStridedBatchedEx(
	cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
	const void *alpha, const void *A, cudaDataType at, int lda, long long sa, const void *B,
	cudaDataType bt, int ldb, long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
	long long sc, int count, cublasComputeType_t comp, cublasGemmAlgo_t algo)
{
	for (int i = 0; i < count; i++) {
		cublasStatus_t r = cublasGemmEx(h, ta, tb, m, n, k, alpha,
						(const __nv_bfloat16 *)A + i * sa, at, lda,
						(const __nv_bfloat16 *)B + i * sb, bt, ldb, beta,
						(float *)C + i * sc, ct, ldc, comp, algo);
		if (r)
			return r;
	}
	return 0;
}

#endif
