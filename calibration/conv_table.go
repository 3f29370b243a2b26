//go:build ignore

// Conv_table turns the measured cuDNN workspaces of conv_sweep.py
// (calibration/results/conv_sweep.json) into the table that
// package cudnn embeds (internal/cudnn/h200.tsv): one line per
// convolution, "N Cin Cout H W K stride groups elemsize fwd bwd-data
// bwd-filter pad", tab-separated, or "N fwd bwd-data bwd-filter" when all
// but N is the line before's (a shape's batches, measured one after
// another: the text is half as long), in the sweep's order (padding k/2), then
// patchify_sweep.py's (padding 0), then conv_sweep.py --dfl's (YOLOv9's DFL
// convolution in eval mode, which no graph holds; measured on an H100 with
// the same stack, whose cuDNN gives every call the H200's workspace,
// calibration §16, §29), after a header of # comments naming the
// environment; the same sweep gives the same bytes. It is embedded as
// text, not gzipped: inflating it took two fifths of the decode that the
// first simulation in a process waits for.
//
//	go run calibration/conv_table.go
//	go run calibration/conv_table.go -in calibration/results/conv_sweep_bf16.json -pad0 '' -dfl '' -o internal/cudnn/h200_bf16.tsv
//	go run calibration/conv_table.go -in calibration/results/cl/conv_sweep.json -pad0 '' -dfl '' -o internal/cudnn/h200_cl.tsv
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
)

func main() {
	in := flag.String("in", "calibration/results/conv_sweep.json", "the sweep's `file` (padding k/2)")
	pad0 := flag.String("pad0", "calibration/results/patchify_sweep.json", "a sweep `file` of convolutions without padding (calibration/patchify_sweep.py)")
	dfl := flag.String("dfl", "calibration/results/dfl/conv_sweep.json", "a sweep `file` of the DFL's convolution (conv_sweep.py --dfl)")
	out := flag.String("o", "internal/cudnn/h200.tsv", "the table's `file`")
	flag.Parse()
	b, err := os.ReadFile(*in)
	if err != nil {
		log.Fatal(err)
	}
	var sweep struct {
		Env  map[string]any `json:"env"`
		Rows [][]int64      `json:"rows"` // 12 numbers; 13 with the padding (--channels-last)
	}
	if err := json.Unmarshal(b, &sweep); err != nil {
		log.Fatalf("%s: %v", *in, err)
	}
	var txt bytes.Buffer
	fmt.Fprintf(&txt, "# cuDNN workspaces measured by calibration/conv_sweep.py (do not edit; go run calibration/conv_table.go)\n")
	fmt.Fprintf(&txt, "# torch %v, CUDA %v, cuDNN %v, %v, cudnn.benchmark %v\n",
		sweep.Env["torch"], sweep.Env["cuda"], sweep.Env["cudnn"], sweep.Env["gpu"], sweep.Env["benchmark"])
	// Sweeps appended to the file (env's sub-objects) that ran on another
	// card, named in the order of their keys.
	var keys []string
	for k := range sweep.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if sub, ok := sweep.Env[k].(map[string]any); ok && sub["gpu"] != nil && sub["gpu"] != sweep.Env["gpu"] {
			fmt.Fprintf(&txt, "# the rows of %s: %v, cuDNN %v\n", k, sub["gpu"], sub["cudnn"])
		}
	}
	if sweep.Env["bf16"] == true {
		fmt.Fprintf(&txt, "# conv_sweep.py --bf16: elemsize 2 is bfloat16 (autocast's amp_dtype bfloat16)\n")
	}
	if sweep.Env["channels_last"] == true {
		fmt.Fprintf(&txt, "# conv_sweep.py --channels-last: x, y and gy channels-last\n")
	}
	fmt.Fprintf(&txt, "# N\tCin\tCout\tH\tW\tK\tstride\tgroups\telemsize\tfwd\tbwd-data\tbwd-filter\tpad, or N\tfwd\tbwd-data\tbwd-filter for the shape of the line before\n")
	// A row whose shape but for N is the previous row's is written short:
	// "N fwd bwd-data bwd-filter".
	var prev [9]int64
	first := true
	row := func(r [12]int64, pad int64) {
		shape := [9]int64{r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], pad}
		if !first && shape == prev {
			fmt.Fprint(&txt, r[0], "\t", r[9], "\t", r[10], "\t", r[11], "\n")
			return
		}
		first, prev = false, shape
		for _, v := range r {
			fmt.Fprint(&txt, v, "\t")
		}
		fmt.Fprint(&txt, pad, "\n")
	}
	for _, r := range sweep.Rows {
		switch len(r) {
		case 12:
			row([12]int64(r), r[5]/2)
		case 13: // the padding tenth
			row([12]int64(append(append([]int64(nil), r[:9]...), r[10:]...)), r[9])
		default:
			log.Fatalf("%s: a row of %d numbers, want 12 or 13", *in, len(r))
		}
	}
	n := len(sweep.Rows)
	if *pad0 != "" {
		b, err := os.ReadFile(*pad0)
		if err != nil {
			log.Fatal(err)
		}
		var p struct {
			Padding int64       `json:"padding"`
			Rows    [][12]int64 `json:"rows"`
		}
		if err := json.Unmarshal(b, &p); err != nil || p.Padding != 0 {
			log.Fatalf("%s: want the rows of convolutions without padding: %v", *pad0, err)
		}
		for _, r := range p.Rows {
			row(r, 0)
		}
		n += len(p.Rows)
	}
	if *dfl != "" {
		b, err := os.ReadFile(*dfl)
		if err != nil {
			log.Fatal(err)
		}
		var d struct {
			Env  map[string]any `json:"env"`
			Rows [][12]int64    `json:"rows"`
		}
		if err := json.Unmarshal(b, &d); err != nil || d.Env["dfl"] != true {
			log.Fatalf("%s: want the rows of conv_sweep.py --dfl: %v", *dfl, err)
		}
		for _, r := range d.Rows {
			row(r, 0)
		}
		n += len(d.Rows)
		head := fmt.Sprintf("# the DFL's convolution (conv_sweep.py --dfl, the last %d rows): %v, cuDNN %v\n", len(d.Rows), d.Env["gpu"], d.Env["cudnn"])
		i := bytes.Index(txt.Bytes(), []byte("# N\t"))
		if i < 0 {
			log.Fatal("the table has no column header to put the DFL's line before")
		}
		txt = *bytes.NewBuffer(append(append(append([]byte(nil), txt.Bytes()[:i]...), head...), txt.Bytes()[i:]...))
	}
	if err := os.WriteFile(*out, txt.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("%d convolutions, %d bytes", n, txt.Len())
}
