package schedule

// This file sizes the transient buffers of PyTorch's CUDA reduction kernel
// (aten/src/ATen/native/cuda/Reduce.cuh: setReduceConfig, ReduceConfig's
// global_memory_size and semaphore_size) for the one reduction whose
// buffers onnxmem has seen matter: a sum over the rows of a contiguous
// [rows, cols] gradient, which a Linear's bias gradient is (addmm's
// backward, grad.sum(0)) and which a transformer runs over B·L rows.
//
// Worked example, vit_b_32's fc1 at batch 32: rows = 32·50 = 1600, cols =
// 3072. The kernel vectorizes 4 outputs a thread (cols divisible by 4), so
// 768 output vectors; its block is 32 × 4 threads (512 threads / 4 a
// vector, 32 lanes on the outputs, 4 warps on the rows), a grid of 768/32 =
// 24 blocks of outputs; each thread has 1600/4 = 400 ≥ 256 rows to sum, so
// the rows are split over ctas = max(min(⌈2112/24⌉, ⌈400/16⌉), ⌈400/256⌉) =
// 25 blocks (2112 = 132 SMs × 2048/128 blocks each on an H200), which
// combine their float32 partial sums through a staging buffer of 4 × 3072
// × 25 × 32 × 4 = 39,321,600 bytes and 24 int semaphores (96 bytes), both
// allocated for the call and freed after it. At batch 8 (400 rows, 100 a
// thread) no split happens and nothing is allocated.
// calibration/reduce_staging.py measured 1,020 shapes (50 to 401,408 rows,
// 64 to 4096 columns, float16 and float32): every one is this to the byte.

// The device the reduction runs on: an H200's streaming multiprocessors and
// the threads each holds at once (cudaDeviceProp.multiProcessorCount and
// maxThreadsPerMultiProcessor), as the cuDNN table is the H200's.
const (
	reduceSMs          = 132
	reduceThreadsPerSM = 2048
)

// columnSumBuffers returns the staging and semaphore bytes of the sum over
// the rows of a contiguous [rows, cols] tensor, 0 and 0 when one block of
// threads sums each column.
func columnSumBuffers(rows, cols int64) (staging, semaphores int64) {
	if rows < 1 || cols < 2 {
		return 0, 0
	}
	vec := int64(1) // output_vec_size
	switch {
	case cols%4 == 0:
		vec = 4
	case cols%2 == 0:
		vec = 2
	}
	maxThreads := 512 / vec
	pow2 := func(d int64) int64 {
		if d >= maxThreads {
			return maxThreads
		}
		p := int64(1)
		for p*2 <= d {
			p *= 2
		}
		return p
	}
	dim0 := cols / vec
	width := min(pow2(dim0), 32)
	height := min(pow2(rows), maxThreads/width)
	width = min(pow2(dim0), maxThreads/height)
	stepOutput, stepInput := width, int64(1)
	if rows < height*16 && rows < 256 {
		return 0, 0 // each warp sums other outputs: no split of the rows
	}
	stepInput = height
	perThread := (rows + stepInput - 1) / stepInput
	grid := (dim0 + stepOutput - 1) / stepOutput
	target := reduceSMs * (reduceThreadsPerSM / (width * height))
	if perThread < 256 || grid > target {
		return 0, 0
	}
	ctas := max(min((target+grid-1)/grid, (perThread+15)/16), (perThread+255)/256)
	if ctas <= 1 {
		return 0, 0
	}
	return 4 * cols * ctas * width * vec, 4 * grid
}

// ColumnSum is the Which of a ConvCall that stands for a column sum.
const ColumnSum = "column-sum"

// ColumnSumBytes returns the transient bytes of the sum over the rows of a
// contiguous [rows, cols] tensor: the staging buffer and the semaphores,
// which the caller allocates and frees together. As one buffer they take
// the same blocks: the staging is a multiple of 512 bytes, the semaphores
// under 512.
func ColumnSumBytes(rows, cols int64) int64 {
	staging, sems := columnSumBuffers(rows, cols)
	return staging + sems
}

// columnSum emits the transient buffer of a sum over the rows of a
// [rows, cols] gradient, through the Workspace policy as a conv call's,
// so that a policy derived at other batch sizes sizes it anew.
func (b *builder) columnSum(rows, cols int64) {
	b.workspace(ConvCall{Phase: b.phase, Which: ColumnSum, N: rows, Cout: cols, ElemSize: 4})
}
