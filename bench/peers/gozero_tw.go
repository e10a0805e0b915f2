// SPDX-License-Identifier: MIT

// W8's runner half, peer: go-zero's TimingWheel, re-implemented in
// gozero_timingwheel.go (built together: go build gozero_tw.go
// gozero_timingwheel.go). The driver below runs the same workload as bench/w8_runner.c, from the same
// precomputed stream (same splitmix64 generator and seed).
//
// Usage: gozero_tw SECONDS PRODUCERS [SLOTS (default 10000)]
// Output: "csv,w8,gozero,P,SLOTS,ops_per_s,p50_ms,p99_ms,max_ms,fires,0"
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ---- the W8 driver (same stream and rules as bench/w8_runner.c) ----

const (
	keys      = 1000000
	streamLen = 1 << 22
	fine      = 200000      // 10 us buckets up to 2 s,
	buckets   = fine + 6000 // then 10 ms buckets up to 62 s
)

var (
	base    = time.Now()
	hist    [buckets + 1]uint64
	latMax  uint64
	latN    uint64
	phase   int32
	stream  []uint64
	opsDone []uint64
)

func nowNs() uint64 { return uint64(time.Since(base)) }

func rnd(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func makeStream() {
	stream = make([]uint64, streamLen)
	s := uint64(2026)
	for i := range stream {
		r := rnd(&s)
		key := (r >> 8) % keys
		sel := r % 10
		op := uint64(0) // move
		if sel >= 9 {
			op = 2 // remove
		} else if sel >= 7 {
			op = 1 // set
		}
		ms := 1000 + (r>>40)%9001
		stream[i] = key | op<<20 | ms<<22
	}
}

func onFire(key, value any) {
	k := key.(uint64)
	if k%2 != 0 {
		return
	}
	due := value.(uint64)
	now := nowNs()
	var late uint64
	if now > due {
		late = now - due
	}
	b := late / 10000
	if b >= fine {
		b = fine + (b-fine)/1000
	}
	if b > buckets {
		b = buckets
	}
	atomic.AddUint64(&hist[b], 1)
	atomic.AddUint64(&latN, 1)
	for {
		m := atomic.LoadUint64(&latMax)
		if late <= m || atomic.CompareAndSwapUint64(&latMax, m, late) {
			break
		}
	}
}

func pct(p float64) float64 {
	n := atomic.LoadUint64(&latN)
	want := uint64(p * float64(n))
	var acc uint64
	for b := 0; b <= buckets; b++ {
		acc += atomic.LoadUint64(&hist[b])
		if acc > want {
			if b < fine {
				return float64(b*10000+5000) / 1e6
			}
			return float64(fine)/100 + float64(b-fine)*10 + 5
		}
	}
	return 0
}

func producer(tw *TimingWheel, id int, wg *sync.WaitGroup) {
	defer wg.Done()
	i := (uint64(id)*streamLen/16 + uint64(id)*977) % streamLen
	var ops uint64
	for atomic.LoadInt32(&phase) == 0 {
	}
	for atomic.LoadInt32(&phase) == 1 {
		for j := 0; j < 64; j++ {
			x := stream[i]
			i = (i + 1) & (streamLen - 1)
			key := x & 0xfffff
			d := time.Duration(x>>22) * time.Millisecond
			switch (x >> 20) & 3 {
			case 0:
				tw.MoveTimer(key|1, d)
			case 1:
				tw.SetTimer(key, nowNs()+uint64(d), d)
			default:
				tw.RemoveTimer(key)
			}
		}
		ops += 64
	}
	opsDone[id] = ops
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: gozero_tw SECONDS PRODUCERS [SLOTS]")
		os.Exit(2)
	}
	seconds, _ := strconv.ParseFloat(os.Args[1], 64)
	np, _ := strconv.Atoi(os.Args[2])
	slots := 10000
	if len(os.Args) > 3 {
		slots, _ = strconv.Atoi(os.Args[3])
	}
	makeStream()
	tw, err := NewTimingWheel(time.Millisecond, slots, onFire)
	if err != nil {
		panic(err)
	}
	s := uint64(7)
	for k := uint64(0); k < keys; k++ { // 1e6 keys pending
		d := time.Duration(1000+rnd(&s)%9001) * time.Millisecond
		tw.SetTimer(k, nowNs()+uint64(d), d)
	}
	// Lateness counts the fires of the timed run only, as in the C driver.
	// (The ticks go-zero's loop missed while it was busy with the prefill
	// are not made up for: time.Ticker drops ticks for a slow receiver, so
	// the wheel runs behind the clock from then on; that is its design.)
	for b := range hist {
		atomic.StoreUint64(&hist[b], 0)
	}
	atomic.StoreUint64(&latMax, 0)
	atomic.StoreUint64(&latN, 0)
	opsDone = make([]uint64, np)
	var wg sync.WaitGroup
	for i := 0; i < np; i++ {
		wg.Add(1)
		go producer(tw, i, &wg)
	}
	t0 := time.Now()
	atomic.StoreInt32(&phase, 1)
	time.Sleep(time.Duration(seconds * float64(time.Second)))
	atomic.StoreInt32(&phase, 2)
	wg.Wait()
	el := time.Since(t0).Seconds()
	var ops uint64
	for _, o := range opsDone {
		ops += o
	}
	fmt.Printf("%-10s %2d producers %5d slots: %7.3f M ops/s, fires %d, lateness p50 %.3f p99 %.3f max %.3f ms\n",
		"gozero", np, slots, float64(ops)/el/1e6, atomic.LoadUint64(&latN), pct(0.5), pct(0.99),
		float64(atomic.LoadUint64(&latMax))/1e6)
	fmt.Printf("csv,w8,gozero,%d,%d,%.0f,%.3f,%.3f,%.3f,%d,0\n", np, slots, float64(ops)/el,
		pct(0.5), pct(0.99), float64(atomic.LoadUint64(&latMax))/1e6, atomic.LoadUint64(&latN))
	tw.Stop()
}
