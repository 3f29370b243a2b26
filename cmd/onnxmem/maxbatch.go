package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
)

func cmdMaxBatch(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("maxbatch",
		"onnxmem maxbatch [-img N] [-budget GiB] [-limit N] [-amp|-half] [-segments K] [-json] MODEL.onnx",
		"Maxbatch finds the largest batch size, up to -limit, whose predicted peak\n(allocated bytes) of the model step (fp32 unless -amp or -half, checkpointed\nwith -segments) fits in -budget GiB. The budget is\ncompared with the peak allocated: leave room for the CUDA context and the\nallocator's fragmentation.",
		"onnxmem maxbatch -budget 40 ../shared/yolov9/yolov9-c-train.onnx")
	img, set := f.imgFlag(), f.settingFlags()
	budget := f.budgetFlag()
	limit := f.positive("limit", 1024, "largest batch `size` to consider")
	asJSON := f.jsonFlag()
	m, code, ok := f.parseAndLoad(args, stdout, stderr)
	if !ok {
		return code
	}
	st, err := set()
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	bytes := budget.bytes()
	n, r, err := m.MaxBatch(st.scenario(1, *img), bytes, *limit)
	if err != nil {
		return fail(stderr, err)
	}
	if *asJSON {
		js := maxBatchJSON{Model: m.Name, Budget: bytes, Limit: *limit, MaxBatch: n}
		if r != nil {
			rj := newResultJSON(r, false)
			js.Result = &rj
		}
		err = writeJSON(stdout, js)
	} else {
		fmt.Fprintln(stdout, stepTitle(m.Name, st.scenario(1, *img)))
		if r == nil {
			// Say how far off batch 1 is.
			if r, err = m.Simulate(st.scenario(1, *img)); err != nil {
				return fail(stderr, err)
			}
			_, err = fmt.Fprintf(stdout, "max batch 0: not even batch 1 fits in %s GiB; it peaks at %s GiB\n", gib(bytes), gib(r.Peak))
		} else {
			fmt.Fprintf(stdout, "max batch %d: peak %s GiB of %s GiB (%s)", n, gib(r.Peak), gib(bytes), where(r))
			if n == *limit {
				fmt.Fprintf(stdout, "; the search stopped at -limit %d", *limit)
			}
			_, err = fmt.Fprintln(stdout)
		}
	}
	return exit(stderr, err)
}

type maxBatchJSON struct {
	Model    string `json:"model"`
	Budget   int64  `json:"budget"`
	Limit    int64  `json:"limit"`
	MaxBatch int64  `json:"max_batch"`
	// Result is the prediction at MaxBatch; absent when it is 0.
	Result *resultJSON `json:"result,omitempty"`
}

// gibValue is a flag.Value: a positive size in GiB.
type gibValue float64

func (g *gibValue) String() string { return strconv.FormatFloat(float64(*g), 'f', -1, 64) }

func (g *gibValue) Set(v string) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || !(x > 0) || math.IsInf(x, 0) || x >= 1<<33 {
		return fmt.Errorf("want a positive number of GiB")
	}
	*g = gibValue(x)
	return nil
}

func (g gibValue) bytes() int64 { return int64(math.Round(float64(g) * (1 << 30))) }
