package sim

import (
	"github.com/onnxmem/onnxmem/allocator"
	"github.com/onnxmem/onnxmem/schedule"
)

// ConvCalls builds sc's program and calls each with every convolution call
// it makes, in order, each given no workspace: what a benchmark of the
// workspace tables looks up.
func ConvCalls(m *Model, sc Options, each func(schedule.ConvCall)) error {
	p, sc, err := m.programPrep(sc)
	if err != nil {
		return err
	}
	_, _, err = m.build(p, sc, func(c schedule.ConvCall) int64 {
		each(c)
		return 0
	})
	return err
}

// LoadResidents allocates p's resident buffers on a as the harness loads
// them, the optimizer's state included (loadResidents).
func LoadResidents(a *allocator.Allocator, p *schedule.Program, ids []allocator.ID) error {
	return loadResidents(a, p, ids, false)
}

// Median is the tests' median (the upper one of an even count).
var Median = median

// SimulateRecorded simulates sc with each new segment at the address that
// recorded gives, a device recording's (runRecorded).
func SimulateRecorded(m *Model, sc Options, recorded func(size int64) (int64, bool)) (*Result, error) {
	p, err := m.program(sc)
	if err != nil {
		return nil, err
	}
	return runRecorded(p, sc, recorded), nil
}
