// Package loss models what training losses allocate on the GPU, op by op, as
// schedule.Tape program fragments between the network's forward and its
// backward. YOLOv9 is the dual task-aligned loss of YOLOv9's train_dual.py.
//
// Worked example: yolov9-s at batch 64 and 640 in float32 with 128 boxes in
// every image. Each branch of the head gives maps of 144 channels (64 DFL
// bins, 80 classes) over 80², 40² and 20² cells, A = 8400 anchors. The loss
// copies the maps into pred_scores [64, 8400, 80] (172 MB) and pred_distri
// [64, 8400, 64] (138 MB) per branch, keeps each branch's DFL softmax
// [64, 8400, 4, 16] (138 MB) for its backward, and then runs the assigner of
// branch 1 and of branch 2 under torch.no_grad(). Inside the assigner every
// tensor of shape [B, M, A] = [64, 128, 8400] is 275 MB in float32. Its
// peak comes in select_topk_candidates, when F.one_hot(topk_idxs, A).sum(-2)
// has made the one-hot [64, 128, 10, 8400] int64 (5505 MB) and its sum (551
// MB) while align_metric, overlaps, mask_in_gts and their product (1101 MB)
// are alive. Of branch 1 its targets are alive too (target_scores 172 MB),
// and of branch 2 the assigner's arguments (pd_scores 172 MB). With the maps'
// copies and the softmaxes (895 MB) and some small tensors (41 MB) the loss
// alone holds 8.44 GB at that moment, of which 104 bytes per element of
// [B, M, A] grow with the boxes. With 16 boxes the [B, M, A] tensors shrink
// eightfold, and the peak (2.31 GB) moves to get_targets, where
// one_hot(target_labels, nc), its torch.where, fg_scores_mask and its
// comparison make 21 bytes per element of [B, A, nc]. The backward frees what the forward saved as its nodes run
// (in reverse creation order: box losses, class losses, decodes) and ends
// with each branch's [64, 144, 8400] gradient (310 MB), the cat of the split
// backward, which the network's backward reads map by map.
//
// How PyTorch decides the program:
//
//   - Python frees a temporary when the expression that used it is done and
//     a function's locals when it returns, in the order of first assignment.
//     A temporary passed to a Python function moves into the callee's frame
//     and goes with its arguments, before its locals; a list frees its items
//     last first. The model follows the loss's source line by line. The
//     assigner runs under torch.no_grad(): nothing in it is saved.
//   - Autograd keeps what each op's formula needs (derivatives.yaml; inputs
//     needed only for the gradient of an input that needs none are not kept):
//     _softmax and _log_softmax keep their result, mv only proj,
//     binary_cross_entropy_with_logits its input and target, masked_select its
//     input and mask, nll_loss its input and target, mul the other factor,
//     minimum, maximum, clamp, pow, atan and div their inputs. The backward
//     frees them when their node has run (in the order codegen declares
//     them: masked_select's mask before its input). Two gradients of one
//     tensor are summed in place into the first unless it is a view, which
//     keeps its base: the DFL's two log_softmax gradients reach
//     pred_dist_pos as views and are summed into a new tensor.
//   - Autocast (autocast_mode.h): matmul runs in float16 (a float16 copy of
//     the softmax); softmax, log_softmax and sum are fp32_set_opt_dtype
//     (softmax of a float16 tensor on CUDA gives float32 without a copy;
//     cross_entropy passes the input's own dtype to log_softmax, so that one
//     stays float16); pow, nll_loss and binary_cross_entropy_with_logits are
//     fp32 ops that cast float16 arguments to float32. Other ops follow type
//     promotion: the assigner works in float32 because the targets are.
//   - Kernels that allocate beyond their output: F.one_hot is zeros plus
//     scatter_; boolean masking (masked_select, x[mask]) makes nonzero's
//     [n, dims] int64 index first; masked_scatter_ (masked_select's
//     backward) makes an int64 prefix sum of the mask; the BCE forward
//     makes log_sigmoid and the log-weight, its backward pos_weight·target
//     and a sigmoid besides the gradient (Loss.cpp, FunctionsManual.cpp);
//     softmax's CUDA backward first makes grad·output; the sum of a bool
//     tensor (if fg_mask.sum():) reads an int64 copy of it.
//
// Assumptions (models of what the inputs do, not fits to measurements):
//
//   - Every image has exactly Boxes boxes, so preprocess makes [B, M, 5].
//   - The number of foreground anchors is B·min(A, M·topk): each box keeps its
//     topk = 10 candidates and candidates of different boxes do not collide
//     (ForegroundAnchors). Only the box loss's [F, …] tensors depend on it.
//     With random boxes (centres in the middle 60% of the image, sides 5% to
//     40%) the assigners found 97.5% of that count with 16 boxes, 89% with
//     64 and 80% with 128, so the model keeps up to 31 MB more for the
//     backward at batch 64.
//   - With more than one box per image some anchor is a candidate of two
//     boxes, so select_highest_overlaps takes its branch (mask_multi_gts,
//     one_hot over the boxes). It did in every run at batch 16 and 64, not
//     at batch 2 with 3 boxes; it never makes the peak.
//   - Left out as too small to matter: scalars (the loss vector, sums, the
//     GradScaler factor), the per-image temporaries of preprocess, unique,
//     the index lists that go to the device, proj's cast, the scratch
//     buffers of topk's radix select and of cub inside nonzero and
//     masked_scatter_. The backward of the box loss's CIoU over the F
//     foreground boxes ([F, 1] tensors) is modelled in bulk.
//
// Checked on an H200 with PyTorch 2.11 (the loss retyped from the sources
// below, on random maps and boxes; not fitted to anything): for yolov9-s's
// maps at batch 64 with 16 and 128 boxes, float32 and AMP, and at batch 16
// with 64 boxes, the loss's forward peak in requested bytes
// (torch.cuda.memory_stats) is the model's to within 100 bytes (the scalars
// the model leaves out), and so is the backward's where the foreground count
// matches the assumption; at batch 2 with 3 boxes the allocation trace
// matches the model event by event for every allocation above 4 KB, except
// the scratch of cub inside nonzero and masked_scatter_ and the
// select_highest_overlaps branch, which that batch did not take.
//
// Sources: utils/loss_tal_dual.py (ComputeLoss, BboxLoss),
// utils/tal/assigner.py (TaskAlignedAssigner, select_candidates_in_gts,
// select_highest_overlaps), utils/tal/anchor_generator.py (make_anchors,
// dist2bbox, bbox2dist), utils/metrics.py (bbox_iou), utils/general.py
// (xywh2xyxy), train_dual.py and data/hyps/hyp.scratch-high.yaml (fl_gamma 0:
// plain BCE) in github.com/WongKinYiu/yolov9; in PyTorch,
// tools/autograd/derivatives.yaml, aten/src/ATen/autocast_mode.h (the op
// lists of autocast_mode.cpp), aten/src/ATen/native/SoftMax.cpp, Loss.cpp,
// LossNLL.cpp (cross_entropy_loss), Onehot.cpp, cuda/IndexKernel.cpp
// (masked_scatter_, masked_select), cuda/TensorTopK.cu, LinearAlgebra.cpp
// (matmul's folding into mv), torch/csrc/autograd/FunctionsManual.cpp,
// engine.cpp and input_buffer.cpp.
package loss
