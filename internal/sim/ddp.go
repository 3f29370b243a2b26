package sim

import (
	"fmt"
	"slices"

	"github.com/onnxmem/onnxmem/allocator"
	"github.com/onnxmem/onnxmem/schedule"
)

// One rank of a DistributedDataParallel training run: what
// torch.nn.parallel.DistributedDataParallel (torch/nn/parallel/distributed.py,
// torch/csrc/distributed/c10d/reducer.cpp and comm.cpp, torch 2.11) and
// torch.distributed add to a run's allocations, as a detection trainer's
// DDP path makes them (python -m torch.distributed.run --nproc_per_node N;
// the barriers and what rank 0 alone does are its family's schedule.Loop):
//
//	dist.barrier()                                      # a 1-byte tensor kept, a 4-byte one
//	model = Model(cfg).to(device); ema = ModelEMA(model) if RANK == 0
//	dist.barrier()                                      # another
//	model.half().float()                                # rank 0 only
//	model = DDP(model, device_ids=[0], static_graph=True):
//	    _verify_param_shape_across_processes            # three 8-byte tensors, 2·ndim int64 per parameter
//	    _sync_module_states                             # parameters and buffers flattened by type
//	                                                    # (chunks of 250 MiB, two in flight), broadcast
//	    Reducer(...)                                    # one bucket of every gradient, for the whole run
//	    _set_static_graph                               # an int32 per parameter, kept
//	for each iteration: model(imgs):
//	    _pre_forward: in the second iteration the buckets are rebuilt in the
//	        order the gradients became ready (first bucket 1 MiB, then 25 MiB):
//	        the old bucket is freed before the new ones are made;
//	        every forward broadcasts the buffers (flattened by type, freed)
//	    _post_forward: in the first iteration (static graph) _DDPSink clones
//	        every output; the originals go, the clones are pred
//
// Validation and the checkpoint run on rank 0 only (Loop.RankZeroOnly),
// on the EMA, which DDP does not wrap. The gradients stay where they were (param.grad), copied
// into the buckets for the all-reduce and back (gradient_as_bucket_view
// False): the bucket is one more copy of every gradient, for the whole run.
//
// Worked example, measured with the official code of a 9.8 M-parameter
// detector at batch 16 under AMP (calibration §23, one H100, world size
// 1): it has 897 parameters with gradients, 39,217,920 bytes. The construction's flat copy is
// 39,377,792 bytes (the parameters and the float buffers) plus 2,328 (the
// 291 num_batches_tracked), freed; the bucket is 39,217,920 bytes, so the
// allocated bytes after the setup are 38.0 MiB above those of the same run
// without DDP; the first forward's clones are the six head maps (77 MiB at
// batch 16); the second forward's rebuild makes buckets of 1,812,800,
// 26,649,152 and 10,755,968 bytes. The run's peak is 38.9 MB above the
// run without DDP, its reserved peak 65 MB.
//
// SyncBatchNorm over one GPU runs plain batch norm (torch/nn/modules/
// batchnorm.py: need_sync is false for a world size of 1), as measured
// (the same bytes as without it). Over several GPUs
// (torch/nn/modules/_functions.py SyncBatchNorm) it saves the same input
// and makes an output of the same type and size as cuDNN's batch norm
// (batch_norm_stats, an all-gather, batch_norm_gather_stats_with_counts,
// batch_norm_elemt; the backward's batch_norm_backward_reduce, an
// all-reduce and batch_norm_backward_elemt), and copies an input only when
// it is neither contiguous nor channels-last, which a convolution's output
// is; what differs are its per-channel statistics (2C+1 values a rank, the
// all-gathered (2C+1)·N, C-sized means and sums), hundreds of bytes a
// layer, which are not counted: a rank over several GPUs is simulated as
// with batch norm, an assumption from the source that issue 37's
// measurements check.

// ddpBucketCaps are the reducer's bucket limits after the rebuild:
// dist._DEFAULT_FIRST_BUCKET_BYTES, then bucket_cap_mb's default 25 MiB.
var ddpBucketCaps = []int64{1 << 20, 25 << 20}

// ddpBroadcastChunk is _sync_module_states's broadcast_bucket_size
// (250 MiB): broadcast_coalesced flattens at most this much at a time,
// closing a chunk once it reaches it.
const ddpBroadcastChunk = 250 << 20

// ddp is what DDP keeps on a rank's device between events.
type ddp struct {
	barrier  allocator.ID   // ProcessGroupNCCL's barrier tensor, once made
	barriers int            // barriers run so far
	buckets  []allocator.ID // the reducer's buckets
	static   allocator.ID   // _set_static_graph's per-parameter table
	forwards int            // forwards run so far
	// grads are the bytes of the parameters with gradients, in parameter
	// order, and ready the same in the order the backward makes them
	// ready; ndims is the sum of their ranks.
	grads, ready []int64
	ndims        int64
	// The model's tensors by type, parameters first then buffers, as
	// _sync_module_states lists them; buffers those of the buffers
	// alone, as every forward broadcasts them.
	states, buffers [][]int64
}

// newDDP reads what DDP needs of the train step p: its parameters with
// gradients and its model's tensors, with off, those the graph does not
// show (a frozen parameter the training forward does not use).
func newDDP(p *schedule.Program, off []schedule.OffGraph) (*ddp, error) {
	d := &ddp{}
	// A parameter's .grad is made once in the backward, when its gradient
	// is ready; the reducer's hook fires then.
	byValue := map[int32]int64{}
	var order []int32
	for i := p.BackwardStart; i < p.BackwardEnd && i < len(p.Events); i++ {
		ev := p.Events[i]
		buf := p.Buffers[ev.Buf]
		if ev.Free || buf.Kind != schedule.ParamGrad || buf.Value < 0 {
			continue
		}
		if _, ok := byValue[int32(buf.Value)]; !ok {
			byValue[int32(buf.Value)] = buf.Bytes
			order = append(order, int32(buf.Value))
			d.ready = append(d.ready, buf.Bytes)
			d.ndims += int64(len(p.Graph.Values[buf.Value].Dims))
		}
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("onnxmem: run: the train step makes no parameter gradient: DistributedDataParallel needs parameters that require grad")
	}
	sorted := slices.Clone(order)
	slices.Sort(sorted)
	for _, v := range sorted {
		d.grads = append(d.grads, byValue[v])
	}
	// By type: the float tensors, then the int64 num_batches_tracked
	// (the resident buffers without a graph value).
	var params, bufs [2][]int64
	for i, b := range p.Resident {
		if p.ResidentRoles[i] != schedule.RoleModel || p.ResidentOff[i] > 0 {
			continue // an off-graph tensor comes below, by its kind
		}
		buf := p.Buffers[b]
		t := 0
		if buf.Value < 0 {
			t = 1
		}
		if p.ResidentBuffer[i] {
			bufs[t] = append(bufs[t], buf.Bytes)
		} else {
			params[t] = append(params[t], buf.Bytes)
		}
	}
	for _, u := range off {
		switch {
		case u.Param:
			params[0] = append(params[0], u.Bytes)
		case u.Buffer:
			bufs[0] = append(bufs[0], u.Bytes)
		}
	}
	for t := range params {
		d.states = append(d.states, append(append([]int64(nil), params[t]...), bufs[t]...))
		d.buffers = append(d.buffers, bufs[t])
	}
	return d, nil
}

// chunks splits tensors of one type, in order, into the flat tensors
// that compute_bucket_assignment_by_size makes of them under limit.
func chunks(sizes []int64, limit int64) []int64 {
	var out []int64
	var n int64
	for _, s := range sizes {
		n += s
		if n >= limit {
			out = append(out, n)
			n = 0
		}
	}
	if n > 0 {
		out = append(out, n)
	}
	return out
}

// buckets splits the gradients, in order, into the reducer's buckets
// under caps (the last one repeated).
func buckets(sizes []int64, caps []int64) []int64 {
	var out []int64
	var n int64
	for _, s := range sizes {
		n += s
		if n >= caps[min(len(out), len(caps)-1)] {
			out = append(out, n)
			n = 0
		}
	}
	if n > 0 {
		out = append(out, n)
	}
	return out
}

// broadcast runs broadcast_coalesced over tensors grouped by type: each
// group's flat chunks, in order, at most two allocated at a time
// (comm.cpp keeps two broadcasts in flight), each freed once broadcast.
func (r *runner) broadcast(groups [][]int64) {
	var flights []allocator.ID
	for _, g := range groups {
		for _, n := range chunks(g, ddpBroadcastChunk) {
			if len(flights) == 2 {
				r.free(flights[0])
				flights = flights[1:]
			}
			flights = append(flights, r.malloc(n))
		}
	}
	for _, id := range flights {
		r.free(id)
	}
}

// barrier is dist.barrier on NCCL: a new 1-byte tensor replaces the last
// one, and a 4-byte one comes and goes.
func (r *runner) barrier() {
	d := r.ddp
	id := r.malloc(1)
	if d.barriers > 0 {
		r.free(d.barrier)
	}
	d.barrier = id
	d.barriers++
	r.free(r.malloc(4))
}

// wrap is DDP(model): the construction's checks, broadcast, bucket and
// static-graph table.
func (r *runner) wrap() {
	d := r.ddp
	a, b, c := r.malloc(8), r.malloc(8), r.malloc(8)
	r.free(c)
	r.free(r.malloc(16 * d.ndims))
	r.free(b)
	r.free(a)
	r.broadcast(d.states)
	var all int64
	for _, g := range d.grads {
		all += g
	}
	d.buckets = []allocator.ID{r.malloc(all)}
	d.static = r.malloc(4 * int64(len(d.grads)))
}

// preForward is DDP's _pre_forward: the buckets' rebuild in the second
// iteration, and the buffers' broadcast.
func (r *runner) preForward() {
	d := r.ddp
	d.forwards++
	if d.forwards == 2 {
		// sync_bucket_indices: the bucket order's table and its length.
		t, n := r.malloc(4*int64(len(d.grads)+1)), r.malloc(12)
		r.free(n)
		r.free(t)
		for _, id := range d.buckets {
			r.free(id)
		}
		d.buckets = d.buckets[:0]
		for _, n := range buckets(d.ready, ddpBucketCaps) {
			d.buckets = append(d.buckets, r.malloc(n))
		}
	}
	r.broadcast(d.buffers)
}

// sinkOutputs is _DDPSink in the first iteration under a static graph:
// each output is cloned, in order, then the originals go, last first;
// ids then names the clones.
func (r *runner) sinkOutputs(p *schedule.Program, ids []allocator.ID) {
	clones := make([]allocator.ID, len(p.PrevPredFrom))
	for i, b := range p.PrevPredFrom {
		clones[i] = r.malloc(p.Buffers[b].Bytes)
	}
	for i := len(p.PrevPredFrom) - 1; i >= 0; i-- {
		b := p.PrevPredFrom[i]
		r.free(ids[b])
		ids[b] = clones[i]
	}
}
