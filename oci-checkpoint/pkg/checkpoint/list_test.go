package checkpoint

import (
	"bytes"
	"testing"
	"time"
)

func TestWriteTable(t *testing.T) {
	at := time.Date(2026, 11, 23, 21, 55, 0, 0, time.UTC)
	var b bytes.Buffer
	err := WriteTable(&b, []Entry{
		{Name: "registry.example/engine:ckpt", Engine: "sglang", Size: 6_600_000_000, Created: at,
			GPUCount: 2, GPUModel: "NVIDIA H200", Driver: "580.159.04", CPUVendor: "GenuineIntel"},
		{Name: "rekindle.local/ckpt:cpu", Engine: "generic", Size: 2 << 20, Created: at.In(time.FixedZone("X", 3600)),
			CPUVendor: "AuthenticAMD"},
		{Name: "other/tool:ckpt", Size: 512, Created: at},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `NAME                          ENGINE   SIZE     CREATED                  GPUS             DRIVER      CPU
registry.example/engine:ckpt  sglang   6.1 GiB  2026-11-23 21:55:00 UTC  2 x NVIDIA H200  580.159.04  GenuineIntel
rekindle.local/ckpt:cpu       generic  2.0 MiB  2026-11-23 21:55:00 UTC  none             -           AuthenticAMD
other/tool:ckpt               -        512 B    2026-11-23 21:55:00 UTC  none             -           -
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 30: "5.0 GiB", 3 << 40: "3.0 TiB"} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
