// SPDX-License-Identifier: MIT

// W8 cache peer: go-zero's collection.Cache, re-implemented here (no Go
// modules can be fetched on the benchmark machines, so this is NOT go-zero's
// code but a faithful re-implementation of its algorithm, from
// core/collection/cache.go; the wheel is gozero_timingwheel.go, shared with
// the runner's peer): one sync.Mutex around a
// map[string]any (go-zero's Cache holds a Mutex, not an RWMutex: every Get
// takes it, to touch the LRU, a no-op without a limit), hit/miss counters as
// atomics, TTLs jittered by +-5% through a mutex-guarded rand (mathx.Unstable),
// and a TimingWheel (1 s ticks, 300 slots) run by its own goroutine and fed
// through channels: a new key's SetTimer and a live key's MoveTimer are each
// a channel send. The wheel keeps its timers in a map under an RWMutex
// (go-zero's SafeMap). Driven exactly like bench/w8_cache.c (same keys,
// generator, seeds, permutation, precomputed samples, mixes, medians).
// Output lines: gozero,<mix>,<threads>,<ops per second>,<process CPU ns per op>
//
//	go run gozero_w8.go [keys] [seconds] [reps] [threads,...]
package main

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func procCPUNs() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

var cpuPerOp float64

type unstable struct {
	deviation float64
	r         *rand.Rand
	lock      *sync.Mutex
}

func (u unstable) AroundDuration(base time.Duration) time.Duration {
	u.lock.Lock()
	val := time.Duration((1 + u.deviation - 2*u.deviation*u.r.Float64()) * float64(base))
	u.lock.Unlock()
	return val
}

type Cache struct {
	lock           sync.Mutex
	data           map[string]any
	expire         time.Duration
	timingWheel    *TimingWheel
	unstableExpiry unstable
	hit, miss      uint64
}

func NewCache(expire time.Duration) *Cache {
	c := &Cache{
		data:           make(map[string]any),
		expire:         expire,
		unstableExpiry: unstable{deviation: 0.05, r: rand.New(rand.NewSource(time.Now().UnixNano())), lock: new(sync.Mutex)},
	}
	tw, err := NewTimingWheel(time.Second, 300, func(k, v any) {
		key, ok := k.(string)
		if !ok {
			return
		}
		c.Del(key)
	})
	if err != nil {
		panic(err)
	}
	c.timingWheel = tw
	return c
}

func (c *Cache) Del(key string) {
	c.lock.Lock()
	delete(c.data, key)
	c.lock.Unlock()
	c.timingWheel.RemoveTimer(key)
}

func (c *Cache) Get(key string) (any, bool) {
	c.lock.Lock()
	value, ok := c.data[key]
	// c.lruCache.add(key): emptyLru without a limit
	c.lock.Unlock()
	if ok {
		atomic.AddUint64(&c.hit, 1)
	} else {
		atomic.AddUint64(&c.miss, 1)
	}
	return value, ok
}

func (c *Cache) Set(key string, value any) {
	expire := c.unstableExpiry.AroundDuration(c.expire)
	c.lock.Lock()
	_, ok := c.data[key]
	c.data[key] = value
	c.lock.Unlock()
	if ok {
		c.timingWheel.MoveTimer(key, expire)
	} else {
		c.timingWheel.SetTimer(key, value, expire)
	}
}

// ---- driver ----

const samplesN = 1 << 20

var (
	nkeys   = 1000000
	keys    []string
	values  []any
	perm    []uint32
	samples [][]uint32
	st      uint64
)

func xs() uint64 {
	x := st
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	st = x
	return x
}

func makeKeys() {
	st = 88172645463325252
	keys = make([]string, nkeys)
	values = make([]any, nkeys)
	perm = make([]uint32, nkeys)
	for i := 0; i < nkeys; i++ {
		keys[i] = "key:" + strconv.Itoa(i)
		values[i] = i + 1
		perm[i] = uint32(i)
	}
	for i := nkeys - 1; i > 0; i-- {
		j := xs() % uint64(i+1)
		perm[i], perm[j] = perm[j], perm[i]
	}
}

func makeSamples(writePct, streams int) {
	cdf := make([]float64, nkeys)
	sum := 0.0
	for i := 0; i < nkeys; i++ {
		sum += 1.0 / math.Pow(float64(i+1), 0.99)
		cdf[i] = sum
	}
	samples = make([][]uint32, streams)
	for t := 0; t < streams; t++ {
		st = 0x9e3779b97f4a7c15 * uint64(t+1)
		samples[t] = make([]uint32, samplesN)
		for k := 0; k < samplesN; k++ {
			u := float64(xs()>>11) / 9007199254740992.0 * sum
			lo, hi := 0, nkeys-1
			for lo < hi {
				mid := (lo + hi) / 2
				if cdf[mid] < u {
					lo = mid + 1
				} else {
					hi = mid
				}
			}
			var w uint32
			if int(xs()%100) < writePct {
				w = 0x80000000
			}
			samples[t][k] = perm[lo] | w
		}
	}
}

func runMix(c *Cache, threads int, seconds float64) float64 {
	var stop int32
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ops := make([]uint64, threads)
	ready.Add(threads)
	done.Add(threads)
	for i := 0; i < threads; i++ {
		go func(id int) {
			defer done.Done()
			smp := samples[id]
			pos := 0
			var n uint64
			ready.Done()
			<-start
			for atomic.LoadInt32(&stop) == 0 {
				for j := 0; j < 1024; j++ {
					s := smp[pos&(samplesN-1)]
					pos++
					k := s & 0x7fffffff
					if s&0x80000000 != 0 {
						c.Set(keys[k], values[k])
					} else {
						c.Get(keys[k])
					}
				}
				n += 1024
			}
			ops[id] = n
		}(i)
	}
	ready.Wait()
	t0 := time.Now()
	c0 := procCPUNs()
	close(start)
	time.Sleep(time.Duration(seconds * float64(time.Second)))
	atomic.StoreInt32(&stop, 1)
	done.Wait()
	el := time.Since(t0).Seconds()
	var total uint64
	for _, o := range ops {
		total += o
	}
	if total == 0 {
		total = 1
	}
	cpuPerOp = float64(procCPUNs()-c0) / float64(total)
	return float64(total) / el
}

func main() {
	seconds, reps := 2.0, 3
	tl := "1,2,4,8,16"
	if len(os.Args) > 1 {
		f, _ := strconv.ParseFloat(os.Args[1], 64)
		nkeys = int(f)
	}
	if len(os.Args) > 2 {
		seconds, _ = strconv.ParseFloat(os.Args[2], 64)
	}
	if len(os.Args) > 3 {
		reps, _ = strconv.Atoi(os.Args[3])
	}
	if len(os.Args) > 4 {
		tl = os.Args[4]
	}
	var threads []int
	streams := 1
	for _, p := range strings.Split(tl, ",") {
		t, _ := strconv.Atoi(p)
		threads = append(threads, t)
		if t > streams {
			streams = t
		}
	}
	makeKeys()
	for writes := 10; writes >= 0; writes -= 10 {
		makeSamples(writes, streams)
		c := NewCache(60 * time.Second)
		for i := 0; i < nkeys; i++ {
			c.Set(keys[i], values[i])
		}
		mix := "100/0"
		if writes > 0 {
			mix = "90/10"
		}
		for _, t := range threads {
			r := make([]float64, reps)
			cp := make([]float64, reps)
			for i := range r {
				r[i] = runMix(c, t, seconds)
				cp[i] = cpuPerOp
			}
			sort.Float64s(r)
			sort.Float64s(cp)
			m, mc := r[reps/2], cp[reps/2]
			if reps%2 == 0 {
				m = (r[reps/2-1] + r[reps/2]) / 2
				mc = (cp[reps/2-1] + cp[reps/2]) / 2
			}
			fmt.Printf("gozero,%s,%d,%.0f,%.1f\n", mix, t, m, mc)
		}
		c.timingWheel.Stop()
	}
}
