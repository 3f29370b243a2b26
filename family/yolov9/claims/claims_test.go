package claims

import (
	"strings"
	"testing"
)

// TestClaims checks every claim's verdict against the figures it computed,
// and the facts that hold whatever the numbers: AMP is on by default, the
// model has no backbone attribute, pinned memory is host memory.
func TestClaims(t *testing.T) {
	cs, err := Check(Setting{Model: "yolov9-s", Batch: 16, Img: 320, Boxes: 8, Card: "a100-40"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 8 {
		t.Fatalf("%d claims, want 8", len(cs))
	}
	fig := func(c Claim, i int) float64 { return c.Figures[i].Value }
	for _, c := range cs {
		t.Logf("%d %-6s %s: %s", c.ID, c.Verdict, c.Claim, c.Finding)
		if c.Verdict != "true" && c.Verdict != "false" && c.Verdict != "partly" {
			t.Errorf("claim %d: verdict %q", c.ID, c.Verdict)
		}
		if len(c.Figures) == 0 {
			t.Errorf("claim %d: no figures", c.ID)
		}
	}
	if v := fig(cs[0], 0); cs[0].Verdict != verdict(within(v, 24, 0.15)) || v <= 0 || v >= fig(cs[0], 1) {
		t.Errorf("claim 1: AMP %.2f GB, fp32 %.2f GB, verdict %s", v, fig(cs[0], 1), cs[0].Verdict)
	}
	if cs[1].Verdict == "true" || fig(cs[1], 0) <= 0 {
		t.Errorf("claim 2: AMP is on by default, and it saves (%.1f%%): verdict %s", fig(cs[1], 0), cs[1].Verdict)
	}
	if !strings.Contains(cs[2].Finding, "AttributeError") || cs[2].Verdict == "true" || fig(cs[2], 0) <= 0 || fig(cs[2], 1) <= 0 {
		t.Errorf("claim 3: %s (%s)", cs[2].Finding, cs[2].Verdict)
	}
	if cs[3].Verdict != "false" || fig(cs[3], 0) != 0 {
		t.Errorf("claim 4: pinned memory is host memory: %s", cs[3].Verdict)
	}
	if v := fig(cs[4], 0); cs[4].Verdict != verdict(v >= 3 && v <= 4) || v < 0 {
		t.Errorf("claim 5: validation adds %.2f GB, verdict %s", v, cs[4].Verdict)
	}
	if aux := fig(cs[5], 0); aux <= 0 || fig(cs[5], 1) <= 0 {
		t.Errorf("claim 6: the auxiliary branch costs %.2fx, dropping it saves %.1f%%: both must be positive", aux, fig(cs[5], 1))
	}
	if a, b, c := fig(cs[6], 0), fig(cs[6], 1), fig(cs[6], 2); !(a < b && b < c) {
		t.Errorf("claim 7: reserved at 384, 448, 512 px %.2f, %.2f, %.2f: want growing", a, b, c)
	}
	if fig(cs[7], 1) >= fig(cs[7], 0) || fig(cs[7], 3) >= fig(cs[7], 1) || fig(cs[7], 2) != fig(cs[7], 1) {
		t.Errorf("claim 8: the chain %v must fall with checkpointing and AMP, and pinned memory change nothing", cs[7].Figures)
	}
}

// TestClaimsModel checks that a model without the PGI branch is refused
// with a reason, not checked against a GELAN that does not exist.
func TestClaimsModel(t *testing.T) {
	s := Default
	s.Model = "gelan-c"
	if _, err := Check(s); err == nil || !strings.Contains(err.Error(), "give a yolov9 model") {
		t.Errorf("gelan-c: %v, want an error asking for a yolov9 model", err)
	}
}
