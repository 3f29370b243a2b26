package models_test

import (
	"fmt"

	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/ir"
)

// Build gelan-c for 3 classes and print the dims of its head maps at batch
// 4 and 512×512: 64 box channels and 3 class channels at strides 8, 16 and
// 32.
func ExampleBuild() {
	data, err := models.Build("gelan-c", models.Options{Classes: 3})
	if err != nil {
		fmt.Println(err)
		return
	}
	g, err := ir.Load(data)
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := g.Infer(ir.Binding{Batch: 4, Height: 512, Width: 512})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range g.Outputs {
		fmt.Println(s.Dims[o])
	}
	// Output:
	// [4 67 64 64]
	// [4 67 32 32]
	// [4 67 16 16]
}

// Names lists the family.
func ExampleNames() {
	fmt.Println(models.Names())
	// Output:
	// [yolov9-t yolov9-s yolov9-m yolov9-c yolov9-e gelan-t gelan-s gelan-m gelan-c gelan-e yolov9]
}
