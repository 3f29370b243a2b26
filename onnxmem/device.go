package onnxmem

import "github.com/onnxmem/onnxmem/internal/cards"

// Device is a card as PyTorch sees it, with where its figures come from.
type Device struct {
	Name, Long, Capability          string
	Total, Context, CuBLASWorkspace int64
	Sources                         string
}

// Usable is the allocator's limit on the card: the total less the context.
func (d Device) Usable() int64 { return d.Total - d.Context }

// Exact says the card's cuDNN workspaces were measured; elsewhere, bands.
func (d Device) Exact() bool { return cards.Device(d).Measured() }

// Devices returns the cards onnxmem knows.
func Devices() []Device {
	list := cards.List()
	out := make([]Device, len(list))
	for i, d := range list {
		out[i] = Device(d)
	}
	return out
}

// ParseDevice returns a listed card ("a100-40", "A100-40GB", "4090"), or
// one of a total_memory ("24GB", "23.5GiB", "24GB+ctx=600MiB").
func ParseDevice(s string) (Device, error) {
	d, err := cards.Parse(s)
	return Device(d), err
}

// FormatBytes writes bytes in binary units: "23.5GiB", "600MiB", "512B".
func FormatBytes(n int64) string { return cards.FormatBytes(n) }
