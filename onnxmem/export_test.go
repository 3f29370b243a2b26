package onnxmem

import "github.com/onnxmem/onnxmem/internal/sim"

// EngineWarmSteps is the engine's default of a float16 AMP train step's
// warm-up iterations, which DefaultAMPWarmSteps must say.
const EngineWarmSteps = sim.DefaultAMPWarmSteps

// Options decodes sc for m as the public methods do: sc with its defaults
// filled in and the engine's options.
func Options(m *Model, sc Scenario) (Scenario, sim.Options, error) {
	sc, o, err := m.options(sc)
	return sc, o, err
}
