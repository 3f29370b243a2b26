package allocator

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
)

// deviceRecording is calibration/results/allocator_conf.json, written by
// calibration/allocator_conf.py on an H200 with PyTorch 2.11.
type deviceRecording struct {
	Env struct {
		Torch string `json:"torch"`
		Git   string `json:"git"`
	} `json:"env"`
	Parse [][]string `json:"parse"` // [conf, "ok" or the exception's type, message]
	Runs  []struct {
		Name     string  `json:"name"`
		Seed     int     `json:"seed"`
		Conf     *string `json:"conf"`
		Capacity int64   `json:"capacity"`
		Crash    string  `json:"crash"`
		Ops      []deviceOp
		Record   [][7]int64 `json:"record"` // allocated, reserved, requested, raised, data_ptr, oversize allocations, oversize segments
	} `json:"runs"`
}

// deviceOp is ["m", bytes], ["f", step of the allocation] or ["e"].
type deviceOp struct {
	Kind string
	Arg  int64
}

func (o *deviceOp) UnmarshalJSON(data []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw[0], &o.Kind); err != nil {
		return err
	}
	if len(raw) > 1 {
		return json.Unmarshal(raw[1], &o.Arg)
	}
	return nil
}

func loadDeviceRecording(t *testing.T) *deviceRecording {
	t.Helper()
	data, err := measured.Read("allocator_conf.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec deviceRecording
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	return &rec
}

// replayDevice runs one recorded sequence through an Allocator made with the
// parsed configuration and the recorded capacity, as the script ran it: a
// free of the newest tensor takes effect right after the next allocation
// that succeeds. With hints, each new segment is placed where the device put
// it (the recorded data_ptr of the allocation that created it). It returns
// the first step whose counters, outcome or block address differ, or -1,
// with a description.
func replayDevice(cfg Config, capacity int64, ops []deviceOp, want [][7]int64, hints bool) (int, string) {
	a := NewWithConfig(cfg)
	a.Capacity = capacity
	ids := map[int64]ID{}
	// The script's loop variable holds the newest tensor: freeing it
	// releases the block right after the next allocation that succeeds.
	held, pending := int64(-1), false
	for i, op := range ops {
		w := want[i]
		switch op.Kind {
		case "m":
			if hints && w[4] != 0 {
				a.addrHint = w[4]
			}
			id, err := a.TryMalloc(op.Arg)
			a.addrHint = 0
			raised := int64(0)
			if err != nil {
				raised = 1
			} else {
				if pending {
					a.Free(ids[held])
					delete(ids, held)
					pending = false
				}
				held = int64(i)
				ids[int64(i)] = id
				if hints && a.blocks[a.live[id]].addr != w[4] {
					return i, fmt.Sprintf("malloc(%d) at %#x, device %#x", op.Arg, a.blocks[a.live[id]].addr, w[4])
				}
			}
			if raised != w[3] {
				return i, fmt.Sprintf("malloc(%d) raised %d, device %d", op.Arg, raised, w[3])
			}
		case "f":
			if op.Arg == held {
				pending = true
			} else if id, ok := ids[op.Arg]; ok {
				a.Free(id)
				delete(ids, op.Arg)
			}
		case "e":
			a.EmptyCache()
		}
		st := a.Stats()
		oa, os := a.Oversize()
		got := [7]int64{st.Allocated, st.Reserved, st.Requested, w[3], w[4], oa, os}
		if got != w {
			return i, fmt.Sprintf("%s: allocated %d reserved %d requested %d oversize %d/%d; device %d %d %d %d/%d",
				opString(op), got[0], got[1], got[2], got[5], got[6], w[0], w[1], w[2], w[5], w[6])
		}
	}
	return -1, ""
}

func opString(op deviceOp) string {
	switch op.Kind {
	case "m":
		return fmt.Sprintf("malloc(%d)", op.Arg)
	case "f":
		return fmt.Sprintf("free(step %d)", op.Arg)
	}
	return "empty_cache"
}

// TestDeviceConf replays every sequence that calibration/allocator_conf.py
// recorded on an H200 with PyTorch 2.11, each under its PYTORCH_CUDA_ALLOC_CONF
// and capacity, and requires allocated, reserved and requested bytes, the
// oversize counts, which requests ran out of memory and where each block
// lies to match the device after every step. Segments are placed at the
// addresses the device gave them (cudaMalloc's choice is no rule of the
// allocator, but it breaks ties between equal free blocks).
func TestDeviceConf(t *testing.T) {
	rec := loadDeviceRecording(t)
	var table strings.Builder
	fmt.Fprintf(&table, "%-26s %4s %-55s %11s %5s %4s %9s %18s\n", "run", "seed", "PYTORCH_CUDA_ALLOC_CONF", "capacity", "steps", "OOMs", "mismatch", "without addresses")
	for _, r := range rec.Runs {
		if r.Crash != "" {
			t.Errorf("%s seed %d crashed on the device: %s", r.Name, r.Seed, r.Crash)
			continue
		}
		conf := ""
		if r.Conf != nil {
			conf = *r.Conf
		}
		cfg, err := ParseConf(conf)
		if err != nil {
			t.Errorf("%s: %v", r.Name, err)
			continue
		}
		ooms := 0
		for _, w := range r.Record {
			if w[3] == 1 {
				ooms++
			}
		}
		step, why := replayDevice(cfg, r.Capacity, r.Ops, r.Record, true)
		mismatch := "none"
		if step >= 0 {
			mismatch = fmt.Sprintf("step %d", step)
			t.Errorf("%s seed %d (%q, capacity %d): step %d: %s", r.Name, r.Seed, conf, r.Capacity, step, why)
		}
		// Without the device's addresses, ties between equal free blocks may
		// go the other way: reported, not required.
		bare := "none"
		if step, _ := replayDevice(cfg, r.Capacity, r.Ops, r.Record, false); step >= 0 {
			bare = fmt.Sprintf("from step %d", step)
		}
		fmt.Fprintf(&table, "%-26s %4d %-55s %11d %5d %4d %9s %18s\n", r.Name, r.Seed, conf, r.Capacity, len(r.Ops), ooms, mismatch, bare)
	}
	t.Logf("torch %s (%s)\n%s", rec.Env.Torch, rec.Env.Git, table.String())
}

// TestDeviceConfDiscriminates checks that the recordings pin each rule down:
// replayed with an option dropped or changed, some run of that option no
// longer matches the device.
func TestDeviceConfDiscriminates(t *testing.T) {
	rec := loadDeviceRecording(t)
	mutations := []struct {
		name  string
		apply func(c Config, capacity int64) (Config, int64, bool)
	}{
		{"max_split_size_mb dropped", func(c Config, k int64) (Config, int64, bool) {
			ok := c.MaxSplitSize > 0
			c.MaxSplitSize = 0
			return c, k, ok
		}},
		{"max_split_size_mb + 2 MiB", func(c Config, k int64) (Config, int64, bool) {
			ok := c.MaxSplitSize > 0
			c.MaxSplitSize += 2 * mib
			return c, k, ok
		}},
		{"expandable_segments dropped", func(c Config, k int64) (Config, int64, bool) {
			ok := c.ExpandableSegments
			c.ExpandableSegments = false
			return c, k, ok
		}},
		{"roundup_power2_divisions dropped", func(c Config, k int64) (Config, int64, bool) {
			ok := c.RoundupPower2Divisions != [16]uint64{}
			c.RoundupPower2Divisions = [16]uint64{}
			return c, k, ok
		}},
		{"roundup list's '>' from the last boundary on (older PyTorch)", func(c Config, k int64) (Config, int64, bool) {
			ok := c.RoundupPower2Divisions[10] == 4 && c.RoundupPower2Divisions[11] == 8
			c.RoundupPower2Divisions[10] = 8
			return c, k, ok
		}},
		{"garbage_collection_threshold dropped", func(c Config, k int64) (Config, int64, bool) {
			ok := c.GarbageCollectionThreshold > 0
			c.GarbageCollectionThreshold = 0
			return c, k, ok
		}},
		{"garbage_collection_threshold 0.5", func(c Config, k int64) (Config, int64, bool) {
			ok := c.GarbageCollectionThreshold > 0
			c.GarbageCollectionThreshold = 0.5
			return c, k, ok
		}},
		{"capacity dropped", func(c Config, k int64) (Config, int64, bool) { return c, 0, k > 0 }},
	}
	for _, mu := range mutations {
		runs, caught := 0, 0
		for _, r := range rec.Runs {
			conf := ""
			if r.Conf != nil {
				conf = *r.Conf
			}
			cfg, err := ParseConf(conf)
			if err != nil {
				continue
			}
			c, k, ok := mu.apply(cfg, r.Capacity)
			if !ok {
				continue
			}
			runs++
			if step, _ := replayDevice(c, k, r.Ops, r.Record, true); step >= 0 {
				caught++
			}
		}
		if caught == 0 {
			t.Errorf("%s: all %d runs still match the device", mu.name, runs)
		}
		t.Logf("%-62s %2d of %2d runs no longer match", mu.name, caught, runs)
	}
}
