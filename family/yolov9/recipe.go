package yolov9

import (
	"fmt"

	"github.com/onnxmem/onnxmem/family/yolov9/loss"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// Recipe returns the training step of train_dual.py (and train.py, which
// differs only in its loss) for one optimizer:
//
//	imgs = imgs.to(device, non_blocking=True).float() / 255
//	with torch.cuda.amp.autocast(amp):
//	    pred = model(imgs)
//	    loss, loss_items = compute_loss(pred, targets.to(device))
//	scaler.scale(loss).backward()
//	scaler.unscale_(optimizer)
//	torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
//	scaler.step(optimizer); scaler.update()
//	optimizer.zero_grad()
//	ema.update(model)
//
// The loop keeps two 4-byte tensors resident (GradScaler's scale and growth
// tracker, or the running loss mloss), and utils/torch_utils.py's
// smart_optimizer makes three parameter groups (Groups). The loss is
// utils/loss_tal_dual.py's ComputeLoss with boxes ground-truth boxes in
// every image. train_dual.py and train.py call utils/general.py's
// init_seeds(..., deterministic=True) first, which sets
// CUBLAS_WORKSPACE_CONFIG to ":4096:8": eight 4096 KiB chunks, 32 MiB a
// cuBLAS handle on every card, where PyTorch's own default before compute
// capability 9.0 is 8.125 MiB (aten/src/ATen/cuda/CublasHandlePool.cpp).
func (Family) Recipe(_ *ir.Graph, opt schedule.Optimizer, ema bool, boxes int64) *schedule.Train {
	return &schedule.Train{
		Loss:         trainLoss{loss.NewYOLOv9()},
		Boxes:        boxes,
		Optimizer:    opt,
		AMSGrad:      opt == schedule.AdamW, // smart_optimizer passes amsgrad=True to AdamW, not to Adam
		EMA:          ema,
		Uint8Batch:   true,
		LoopScalars:  2,
		GradScaler:   true,
		ClipGradNorm: true,
		Groups:       Groups,
		// init_seeds(deterministic=True): CUBLAS_WORKSPACE_CONFIG=:4096:8.
		CuBLASWorkspace: 8 * 4096 << 10,
	}
}

// Groups returns smart_optimizer's parameter groups in param_groups order:
// the biases (g[2], no decay), the weights with decay (g[0], the convs'), and
// the batch-norm weights (g[1], no decay).
func Groups(g *ir.Graph, params []ir.ValueID) []schedule.ParamGroup {
	groups := []schedule.ParamGroup{{}, {Decay: true}, {}}
	for _, v := range params {
		k := groupOf(g, v)
		groups[k].Params = append(groups[k].Params, v)
	}
	return groups
}

// groupOf returns the index in Groups's list of parameter v's group, from
// the first use that decides it: a batch norm's weight, or a bias (input 2
// of a conv or a batch norm).
func groupOf(g *ir.Graph, v ir.ValueID) int {
	for _, c := range g.Values[v].Consumers {
		n := &g.Nodes[c]
		for j, in := range n.Inputs {
			switch {
			case in != v:
			case n.OpType == "BatchNormalization" && j == 1:
				return 2
			case j == 2:
				return 0
			}
		}
	}
	return 1
}

// trainLoss adapts the dual task-aligned loss to schedule.Loss: it reads the
// head's branches from the graph's outputs and hands each map its branch's
// gradient.
type trainLoss struct{ l *loss.YOLOv9 }

// The training loss lets a run derive its steps from a few builds.
var _ schedule.CountShaped = trainLoss{}

// input describes the head's maps for the loss. It panics when the outputs
// are not a detection head's maps: Family.CheckTrain rules such graphs out.
func (t trainLoss) input(in schedule.LossInput) (loss.Input, [][]int) {
	br := Branches(in.Outputs)
	if len(br) == 0 {
		panic(fmt.Sprintf("yolov9: the loss needs the detection head's maps, and the graph's %d outputs are not", len(in.Outputs)))
	}
	li := loss.Input{Batch: in.Batch, AMP: in.AMP, Boxes: in.Boxes, Counts: in.BoxCounts, Validation: in.Validation}
	for _, b := range br {
		var maps [][3]int64
		for _, j := range b {
			d := in.Outputs[j].Dims
			maps = append(maps, [3]int64{d[1], d[2], d[3]})
			li.DType = in.Outputs[j].DType
		}
		li.Maps = append(li.Maps, maps)
	}
	return li, br
}

func (t trainLoss) Forward(tp schedule.Tape, in schedule.LossInput) []schedule.Buf {
	li, _ := t.input(in)
	return t.l.Forward(tp, li)
}

func (t trainLoss) Backward(tp schedule.Tape, in schedule.LossInput, saved []schedule.Buf) []schedule.Buf {
	li, br := t.input(in)
	grads := t.l.Backward(tp, li, saved)
	out := make([]schedule.Buf, len(in.Outputs))
	for i, b := range br {
		for _, j := range b {
			out[j] = grads[i]
		}
	}
	return out
}

// CountShape is the loss's CountShape (schedule.CountShaped).
func (t trainLoss) CountShape(in schedule.LossInput) (string, []int64) {
	li, _ := t.input(in)
	return t.l.CountShape(li)
}

// Loop returns train_dual.py's (and train.py's) loop around the steps, for
// g's classes:
//
//	model.half().float()                          # pre-reduce anchor precision
//	model.class_weights = labels_to_class_weights(...).to(device) * nc
//	compute_loss = ComputeLoss(model)             # BCE pos_weight, the DFL projection (16 bins)
//	mloss = torch.zeros(3, device=device)
//
// and val_dual.run's (val.py's) iouv = torch.linspace(0.5, 0.95, 10) and
// loss = torch.zeros(3); its batches are letterboxed rectangles
// (utils/dataloaders.py, rect with pad 0.5). val.py, which train.py calls
// for the single-head GELAN models, adds each batch's loss,
//
//	preds, train_out = model(im) if compute_loss else ...
//	if compute_loss:
//	    loss += compute_loss(train_out, targets)[1]
//
// under smart_inference_mode; val_dual.py has that line commented out.
//
// Under torch.distributed.run the setup passes two barriers of
// torch_distributed_zero_first (check_dataset before the model is made,
// the train loader's dataset after the EMA), and everything under
// "if RANK in {-1, 0}" is rank 0's alone: the EMA, model.half().float(),
// the validation and the checkpoint.
func (Family) Loop(g *ir.Graph) *schedule.Loop {
	return &schedule.Loop{
		SetupTensors:     []int64{4 * classes(g), 4, 4 * regMax, 4 * 3},
		HalfFloatAtSetup: true,
		SetupBarriers:    2,
		RankZeroOnly:     true,
		ValTensors:       []int64{4 * 10, 4 * 3},
		ValLoss:          func(outs []schedule.Output) bool { return len(Branches(outs)) == 1 },
		ValShape: func(side, num, den int64) (int64, int64) {
			if num < den {
				return letterbox(side, num, den), letterbox(side, 1, 1)
			}
			return letterbox(side, 1, 1), letterbox(side, den, num)
		},
	}
}

// classes returns the number of classes of g's detection head: the
// channels of its first output less the 4·reg_max box channels; 80 when
// the graph does not declare them.
func classes(g *ir.Graph) int64 {
	if len(g.Outputs) > 0 {
		if d := g.Values[g.Outputs[0]].Dims; len(d) > 1 && d[1].Value > 4*regMax {
			return d[1].Value - 4*regMax
		}
	}
	return 80
}

// letterbox returns the side that the rectangular validation gives to a
// side of ratio num/den of img: ceil(img·num/den/32 + 0.5)·32.
func letterbox(img, num, den int64) int64 {
	// ceil(x + 0.5) for x = img·num/(32·den), in integers.
	return (2*img*num + 96*den - 1) / (64 * den) * 32
}

// Harness returns "before_step": the ground truth's harness
// (../shared/groundtruth/calibration.jsonl) empties the cache before each
// scenario and again just before the measured step, the warm-up's
// gradients still alive; replayed so in its order, its model steps'
// reserved peaks follow to a median of 0.01%, and with the cache emptied
// before the warm-up only to 1.5%.
func (Family) Harness() string { return "before_step" }
