package pack

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/models"
)

// The memory bound of Write, measured: a child process (this test binary re-executed)
// packs a synthetic checkpoint of 48 fp32 tensors of 8 MiB (384 MiB) whose largest
// OUTPUT tensor is 8 MiB (two [1024, 2048] fp32 concatenated, cast to bf16, K-major),
// and its peak RSS (getrusage ru_maxrss of the child, which also counts the Go runtime,
// the test binary's text and the page tables) must stay within
//
//	1.5 × largest output tensor + 32 MiB.
//
// The 32 MiB constant: the Go runtime and this test binary's resident text and data are
// ~10-15 MiB, the per-worker row-block scratch is ≤ 3.5 MiB per worker (packBlockBytes
// = 1 MiB of source, its float64 copy, its output), and the Go heap may sit up to one GC
// cycle above its live size for the small per-tensor allocations. Measured: 18 MiB
// peak in all (8 MiB of it the K-major buffer) against a bound of 44 MiB. A leak of one source
// tensor per output, or a whole-checkpoint buffer, breaks it: the checkpoint is 384 MiB.
// No GOMEMLIMIT or SetGCPercent is used: the bound holds with the Go defaults.

const (
	rssTensors   = 48
	rssRows      = 1024
	rssCols      = 2048 // 1024 × 2048 fp32 = 8 MiB per source tensor
	rssConstant  = 32 << 20
	rssChildEnv  = "XPUINJECT_PACK_RSS_CHILD"
	rssPeakLabel = "XPUINJECT_VMHWM_KB="
)

// rssPlan: pairs of sources concatenated, cast and K-major (output [2048, 2048] bf16 =
// 8 MiB, the largest), single sources cast and K-major (4 MiB), and single sources cast
// row-major (4 MiB), so every code path that buffers is exercised.
func rssPlan(dir string) (*plan.Plan, int64) {
	p := &plan.Plan{Schema: plan.SchemaVersion, Tool: "xpuinject test", Source: plan.Source{Path: dir}, Arch: "llama"}
	name := func(i int) string { return fmt.Sprintf("t%02d.weight", i) }
	var largest int64
	for i := 0; i < rssTensors; {
		var o plan.TensorPlan
		switch i % 8 {
		case 0, 4: // pair
			o = plan.TensorPlan{Name: fmt.Sprintf("out%02d.weight", i), Sources: []string{name(i), name(i + 1)},
				Transforms: []string{plan.TConcatGateUp, plan.TCastBF16, plan.TPrepackKMajor}, Shape: []int64{rssCols, 2 * rssRows},
				DType: "BF16", Layout: plan.LayoutKMajor, Split: []int64{rssRows, rssRows}}
			i += 2
		case 2, 6:
			o = plan.TensorPlan{Name: fmt.Sprintf("out%02d.weight", i), Sources: []string{name(i)},
				Transforms: []string{plan.TCastBF16, plan.TPrepackKMajor}, Shape: []int64{rssCols, rssRows}, DType: "BF16", Layout: plan.LayoutKMajor}
			i++
		default:
			o = plan.TensorPlan{Name: fmt.Sprintf("out%02d.weight", i), Sources: []string{name(i)},
				Transforms: []string{plan.TCastBF16}, Shape: []int64{rssRows, rssCols}, DType: "BF16", Layout: plan.LayoutRowMajor}
			i++
		}
		largest = max(largest, o.Shape[0]*o.Shape[1]*2)
		p.Layers = append(p.Layers, plan.LayerPlan{Module: fmt.Sprintf("m%02d", i), Kind: "linear", Kernel: "gemm", Outputs: []plan.TensorPlan{o}})
	}
	return p, largest
}

// writeBigCheckpoint streams rssTensors fp32 tensors of pseudo-random finite values.
func writeBigCheckpoint(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "llama"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// two files of 24 tensors, written without holding them in memory
	for fi := 0; fi < 2; fi++ {
		var hs []*models.Tensor
		for i := fi * rssTensors / 2; i < (fi+1)*rssTensors/2; i++ {
			hs = append(hs, &models.Tensor{Name: fmt.Sprintf("t%02d.weight", i), DType: models.F32, Shape: []int64{rssRows, rssCols}})
		}
		fh, err := os.Create(filepath.Join(dir, fmt.Sprintf("model-%05d-of-00002.safetensors", fi+1)))
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriterSize(fh, 1<<20)
		if _, err := models.WriteHeader(w, hs, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		x := uint32(2463534242 + fi)
		var b [4]byte
		for n := 0; n < len(hs)*rssRows*rssCols; n++ {
			x ^= x << 13 // xorshift32
			x ^= x >> 17
			x ^= x << 5
			// sign and mantissa random, exponent in [-8, 7]: finite, varied rounding
			binary.LittleEndian.PutUint32(b[:], x&0x807fffff|(119+x>>28)<<23)
			w.Write(b[:])
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPackPeakRSS(t *testing.T) {
	if raceEnabled {
		t.Skip("peak RSS under -race measures the race detector's shadow memory, not Write (the bound is checked by go test without -race)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	writeBigCheckpoint(t, src)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPackPeakRSSChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), rssChildEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child pack failed: %v\n%s", err, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	peak := ru.Maxrss * 1024 // kilobytes on Linux
	pl, largest := rssPlan(src)
	bound := largest*3/2 + rssConstant
	var hwm int64
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, rssPeakLabel); i >= 0 {
			hwm, _ = strconv.ParseInt(strings.TrimSpace(line[i+len(rssPeakLabel):]), 10, 64)
		}
	}
	if hwm == 0 {
		t.Fatalf("child did not report VmHWM:\n%s", out)
	}
	t.Logf("checkpoint %d MiB, largest output %d MiB, peak RSS %.1f MiB (child VmHWM %.1f MiB), bound %.1f MiB",
		rssTensors*rssRows*rssCols*4>>20, largest>>20, float64(peak)/(1<<20), float64(hwm)/1024, float64(bound)/(1<<20))
	if peak > bound {
		t.Errorf("peak RSS %d bytes exceeds 1.5 × %d + %d = %d", peak, largest, rssConstant, bound)
	}
	// the child's output is right, not just small: spot-check one K-major concat value
	got, _ := readPacked(t, filepath.Join(dir, "out"))
	if len(got) != len(pl.Layers) {
		t.Errorf("child packed %d tensors, want %d", len(got), len(pl.Layers))
	}
	ck, err := models.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	t01 := ck.Tensors["t01.weight"]
	fh, _ := os.Open(t01.File)
	defer fh.Close()
	var b [4]byte
	// out00 = concat(t00, t01) K-major: element [k=5][n=rssRows+7] = t01[7][5]
	fh.ReadAt(b[:], t01.Offset+4*(7*rssCols+5))
	want := BF16FromF32(math.Float32frombits(binary.LittleEndian.Uint32(b[:])))
	o := got["out00.weight"].data
	if g := binary.LittleEndian.Uint16(o[2*(5*2*rssRows+rssRows+7):]); g != want {
		t.Errorf("out00.weight[5][%d] = %#04x, want %#04x", rssRows+7, g, want)
	}
}

// TestPackPeakRSSChild is the child half of TestPackPeakRSS; it does nothing unless
// started by it.
func TestPackPeakRSSChild(t *testing.T) {
	dir := os.Getenv(rssChildEnv)
	if dir == "" {
		t.Skip("runs only as TestPackPeakRSS's child process")
	}
	src := filepath.Join(dir, "src")
	ck, err := models.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	pl, _ := rssPlan(src)
	if _, err := Write(context.Background(), ck, pl, filepath.Join(dir, "out"), Options{Tool: "t", MaxShardSize: 100 << 20}); err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb := strings.Fields(line)[1]
			fmt.Println(rssPeakLabel + kb)
		}
	}
}
