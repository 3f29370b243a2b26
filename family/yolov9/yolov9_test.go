package yolov9

import "testing"

func TestLayerIn(t *testing.T) {
	for s, want := range map[string]int{
		"/model.3/cv1/conv/Conv":        3,
		"model.22.cv3.0.0.conv.bias":    22,
		"/model.12/Concat":              12,
		"['', 'model.7', 'model.7.bn']": 7,
		": models.yolo.DetectionModel/model.38: models.yolo.DualDDetect/cat_61": 38,
		"onnx::Split_2586":     -1,
		"submodel.3/x":         -1,
		"/model.x/Conv":        -1,
		"/model.3a/Conv":       -1,
		"Concat_1":             -1,
		"model.":               -1,
		"/backbone/model.9999": 9999,
	} {
		if got := layerIn(s); got != want {
			t.Errorf("layerIn(%q) = %d, want %d", s, got, want)
		}
	}
}
