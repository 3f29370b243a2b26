package schedule

import "math"

// This file sizes the transient buffers of PyTorch's CUDA reduction kernel
// (aten/src/ATen/native/cuda/Reduce.cuh: setReduceConfig, ReduceConfig's
// global_memory_size and semaphore_size) for the reductions whose buffers
// onnxmem has seen matter: a sum over the rows of a contiguous [rows, cols]
// gradient, which a Linear's bias gradient is (addmm's backward,
// grad.sum(0)) and which a transformer runs over B·L rows; and a conv
// bias's gradient, grad_output.sum({0, 2, 3}), whose launch follows the
// gradient's layout (ChannelSum, ExpandedChannelSum).
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
// 64 to 4096 columns, float16 and float32): every one is this to the byte;
// calibration/conv_bias_reduce.py 1,896 conv bias sums in four layouts,
// each to the byte too.

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
	vec := int64(1) // output_vec_size
	switch {
	case cols%4 == 0:
		vec = 4
	case cols%2 == 0:
		vec = 2
	}
	return reduceBuffers(rows, cols, vec)
}

// blockDims returns the reduction kernel's block, ReduceConfig's
// set_block_dimension: up to a warp's 32 lanes along dim0 (the fastest
// dimension), then as many warps along dim1 as maxThreads allows, each
// side a power of two no larger than its dimension.
func blockDims(dim0, dim1, maxThreads int64) (width, height int64) {
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
	width = min(pow2(dim0), 32)
	height = min(pow2(dim1), maxThreads/width)
	width = min(pow2(dim0), maxThreads/height)
	return width, height
}

// reduceBuffers is columnSumBuffers for output vectors of vec columns: 1
// when the columns are not adjacent in memory (Reduce.cuh vectorizes
// along the output only when its stride is the element's size).
func reduceBuffers(rows, cols, vec int64) (staging, semaphores int64) {
	if rows < 1 || cols < 2 {
		return 0, 0
	}
	dim0 := cols / vec
	width, height := blockDims(dim0, rows, 512/vec)
	stepOutput, stepInput := width, int64(1)
	if rows < height*16 && rows < 256 {
		return 0, 0 // each warp sums other outputs: no split of the rows
	}
	stepInput = height
	perThread := (rows + stepInput - 1) / stepInput
	grid := (dim0 + stepOutput - 1) / stepOutput
	ctas := blocksPerOutput(perThread, grid, width*height)
	if ctas <= 1 {
		return 0, 0
	}
	return 4 * cols * ctas * width * vec, 4 * grid
}

// blocksPerOutput returns setReduceConfig's ctas_per_output: how many
// blocks split each output's inputs, perThread of them a thread, when the
// grid's grid blocks of threads each leave room on the device (1: no
// split, and no staging).
func blocksPerOutput(perThread, grid, threads int64) int64 {
	target := reduceSMs * (reduceThreadsPerSM / threads)
	if perThread < 256 || grid > target {
		return 1
	}
	return max(min((target+grid-1)/grid, (perThread+15)/16), (perThread+255)/256)
}

// ColumnSum is the Which of a ConvCall that stands for a column sum.
const ColumnSum = "column-sum"

// ChannelSum and ExpandedChannelSum are the Whichs of a ConvCall that
// stands for a conv bias's gradient, convolution_backward's
// grad_output.sum({0, 2, 3}) over N·OutH·OutW rows (ConvCall.N) of Cout
// columns; the layout of the incoming gradient picks Reduce.cuh's launch.
//
// A gradient with contiguous rows of OutH·OutW (a fresh gradient, or a
// concat's slice of one) is reduced along its fastest dimension: a warp's
// 32 lanes sum along the rows of one column, up to 16 warps take other
// columns or split the rows, and a split over blocks stages only 4 bytes
// a column and block (channelSumBuffers).
//
// The seed of loss = Σ o.sum() reaches the head's convs as one element
// expanded to the output's shape, stride 0 everywhere; TensorIterator
// then takes the kept C as the fastest dimension, so the kernel is the
// column sum's with unvectorized outputs: 32 columns a block, 16 warps on
// the rows, and a split stages 4 × C × ctas × 32 bytes. Worked example, a
// 1×1 conv to 80 classes on 80×80 at batch 8: 51,200 rows, 80 columns; 3
// blocks of columns, 3,200 rows a thread, split over min(⌈528/3⌉,
// ⌈3200/16⌉) = 176 blocks: a staging of 4 × 80 × 176 × 32 = 1,802,240
// bytes, which the ground truth's model-step traces of that conv's
// backward allocate and free (and 512,000 and 409,600 bytes on 40×40 for
// 80 and 64 columns, nothing on 20×20).
const (
	ChannelSum         = "channel-sum"
	ExpandedChannelSum = "channel-sum-expanded"
)

// HalfSum is the Which of a ConvCall that stands for a sum with a
// half-precision output over an input of N·Cin elements of ElemSize bytes
// into N outputs. An input past 32-bit indexing (2^31-1 bytes) makes the
// CUDA reduction split into sub-iterators (aten/src/ATen/native/cuda/
// Reduce.cuh, gpu_reduce_kernel); a half-precision output cannot carry the
// float32 partial sums between them, so the kernel accumulates into a
// float32 buffer of the output's elements while it runs
// (calibration/half_sum.py: from exactly that size). Which side of the
// limit an input lies on depends on the batch, so the buffer is sized as a
// workspace is, at each batch (ReductionBytes).
const HalfSum = "half-sum"

// IsReduction reports whether a ConvCall's Which names a reduction's
// buffers (ColumnSum, ChannelSum, ExpandedChannelSum, HalfSum) instead of
// a cuDNN call.
func IsReduction(which string) bool {
	return which == ColumnSum || which == ChannelSum || which == ExpandedChannelSum || which == HalfSum
}

// ReductionBytes returns the transient bytes of a reduction's ConvCall:
// its staging buffer and semaphores, allocated and freed together.
func ReductionBytes(c ConvCall) int64 {
	var staging, sems int64
	switch c.Which {
	case HalfSum:
		if c.N*c.Cin*c.ElemSize > math.MaxInt32 {
			staging = 4 * c.N
		}
	case ChannelSum:
		staging, sems = channelSumBuffers(c.N, c.Cout)
	case ExpandedChannelSum:
		staging, sems = reduceBuffers(c.N, c.Cout, 1)
	default:
		staging, sems = columnSumBuffers(c.N, c.Cout)
	}
	return staging + sems
}

// channelSumBuffers returns the staging and semaphore bytes of a sum of
// cols columns whose rows lie contiguous (setReduceConfig's
// reduction_on_fastest_striding_dimension): block_x_reduce, so the
// staging holds one float32 a column and block.
func channelSumBuffers(rows, cols int64) (staging, semaphores int64) {
	if rows < 1 || cols < 1 {
		return 0, 0
	}
	width, height := blockDims(rows, cols, 512)
	perThread := (rows + width - 1) / width
	if perThread < height*16 && perThread < 256 {
		return 0, 0 // each warp sums other columns: no split of the rows
	}
	perThread = (rows + width*height - 1) / (width * height)
	ctas := blocksPerOutput(perThread, cols, width*height)
	if ctas <= 1 {
		return 0, 0
	}
	return 4 * cols * ctas, 4 * cols
}

// columnSum emits the transient buffer of a sum over the rows of a
// [rows, cols] gradient, through the Workspace policy as a conv call's,
// so that a policy derived at other batch sizes sizes it anew.
func (b *builder) columnSum(rows, cols int64) {
	b.workspace(ConvCall{Phase: b.phase, Which: ColumnSum, N: rows, Cout: cols, ElemSize: 4})
}

// channelSum emits a conv bias gradient's reduction buffers: ChannelSum,
// or ExpandedChannelSum when the incoming gradient is the expanded seed.
func (b *builder) channelSum(rows, cols int64, expanded bool) {
	which := ChannelSum
	if expanded {
		which = ExpandedChannelSum
	}
	b.workspace(ConvCall{Phase: b.phase, Which: which, N: rows, Cout: cols, ElemSize: 4})
}
