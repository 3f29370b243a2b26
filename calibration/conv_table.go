//go:build ignore

// Conv_table turns the measured cuDNN workspaces of conv_sweep.py
// (calibration/results/conv_sweep.json) into the table that
// onnxmem.CuDNNWorkspace embeds (onnxmem/cudnn_h200.tsv.gz): one line per
// convolution, "N Cin Cout H W K stride groups elemsize fwd bwd-data
// bwd-filter", tab-separated, in the sweep's order, after a header of #
// comments naming the environment. gzip's header carries no name or time, so
// the same sweep gives the same bytes.
//
//	go run calibration/conv_table.go
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
)

func main() {
	in := flag.String("in", "calibration/results/conv_sweep.json", "the sweep's `file`")
	out := flag.String("o", "onnxmem/cudnn_h200.tsv.gz", "the table's `file`")
	flag.Parse()
	b, err := os.ReadFile(*in)
	if err != nil {
		log.Fatal(err)
	}
	var sweep struct {
		Env  map[string]any `json:"env"`
		Rows [][12]int64    `json:"rows"`
	}
	if err := json.Unmarshal(b, &sweep); err != nil {
		log.Fatalf("%s: %v", *in, err)
	}
	var txt bytes.Buffer
	fmt.Fprintf(&txt, "# cuDNN workspaces measured by calibration/conv_sweep.py (do not edit; go run calibration/conv_table.go)\n")
	fmt.Fprintf(&txt, "# torch %v, CUDA %v, cuDNN %v, %v, cudnn.benchmark %v\n",
		sweep.Env["torch"], sweep.Env["cuda"], sweep.Env["cudnn"], sweep.Env["gpu"], sweep.Env["benchmark"])
	fmt.Fprintf(&txt, "# N\tCin\tCout\tH\tW\tK\tstride\tgroups\telemsize\tfwd\tbwd-data\tbwd-filter\n")
	for _, r := range sweep.Rows {
		for i, v := range r {
			if i > 0 {
				txt.WriteByte('\t')
			}
			fmt.Fprint(&txt, v)
		}
		txt.WriteByte('\n')
	}
	var gz bytes.Buffer
	w, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		log.Fatal(err)
	}
	w.Write(txt.Bytes())
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, gz.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("%d convolutions, %d bytes", len(sweep.Rows), gz.Len())
}
