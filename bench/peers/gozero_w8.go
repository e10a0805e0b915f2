// SPDX-License-Identifier: MIT

// W8 cache peer: go-zero's collection.Cache, re-implemented here (no Go
// modules can be fetched on the benchmark machines, so this is NOT go-zero's
// code but a faithful re-implementation of its algorithm, from
// core/collection/cache.go and timingwheel.go): one sync.Mutex around a
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
	"container/list"
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

// ---- TimingWheel (go-zero core/collection/timingwheel.go) ----

type timingEntry struct {
	baseEntry
	value   any
	circle  int
	diff    int
	removed bool
}

type baseEntry struct {
	delay time.Duration
	key   any
}

type positionEntry struct {
	pos  int
	item *timingEntry
}

type timingTask struct {
	key   any
	value any
}

type safeMap struct {
	lock sync.RWMutex
	m    map[any]any
}

func (s *safeMap) Get(k any) (any, bool) {
	s.lock.RLock()
	defer s.lock.RUnlock()
	v, ok := s.m[k]
	return v, ok
}

func (s *safeMap) Set(k, v any) {
	s.lock.Lock()
	s.m[k] = v
	s.lock.Unlock()
}

func (s *safeMap) Del(k any) {
	s.lock.Lock()
	delete(s.m, k)
	s.lock.Unlock()
}

type TimingWheel struct {
	interval      time.Duration
	ticker        *time.Ticker
	slots         []*list.List
	timers        *safeMap
	tickedPos     int
	numSlots      int
	execute       func(key, value any)
	setChannel    chan timingEntry
	moveChannel   chan baseEntry
	removeChannel chan any
	stopChannel   chan struct{}
}

func NewTimingWheel(interval time.Duration, numSlots int, execute func(key, value any)) *TimingWheel {
	tw := &TimingWheel{
		interval:      interval,
		ticker:        time.NewTicker(interval),
		slots:         make([]*list.List, numSlots),
		timers:        &safeMap{m: make(map[any]any)},
		tickedPos:     numSlots - 1,
		numSlots:      numSlots,
		execute:       execute,
		setChannel:    make(chan timingEntry),
		moveChannel:   make(chan baseEntry),
		removeChannel: make(chan any),
		stopChannel:   make(chan struct{}),
	}
	for i := range tw.slots {
		tw.slots[i] = list.New()
	}
	go tw.run()
	return tw
}

func (tw *TimingWheel) SetTimer(key, value any, delay time.Duration) {
	tw.setChannel <- timingEntry{baseEntry: baseEntry{delay: delay, key: key}, value: value}
}

func (tw *TimingWheel) MoveTimer(key any, delay time.Duration) {
	tw.moveChannel <- baseEntry{delay: delay, key: key}
}

func (tw *TimingWheel) RemoveTimer(key any) {
	tw.removeChannel <- key
}

func (tw *TimingWheel) Stop() {
	close(tw.stopChannel)
}

func (tw *TimingWheel) run() {
	for {
		select {
		case <-tw.ticker.C:
			tw.onTick()
		case task := <-tw.setChannel:
			tw.setTask(&task)
		case key := <-tw.removeChannel:
			tw.removeTask(key)
		case task := <-tw.moveChannel:
			tw.moveTask(task)
		case <-tw.stopChannel:
			tw.ticker.Stop()
			return
		}
	}
}

func (tw *TimingWheel) getPositionAndCircle(d time.Duration) (pos, circle int) {
	steps := int(d / tw.interval)
	pos = (tw.tickedPos + steps) % tw.numSlots
	circle = (steps - 1) / tw.numSlots
	return
}

func (tw *TimingWheel) setTask(task *timingEntry) {
	if task.delay < tw.interval {
		task.delay = tw.interval
	}
	if val, ok := tw.timers.Get(task.key); ok {
		entry := val.(*positionEntry)
		entry.item.value = task.value
		tw.moveTask(task.baseEntry)
	} else {
		pos, circle := tw.getPositionAndCircle(task.delay)
		task.circle = circle
		tw.slots[pos].PushBack(task)
		tw.timers.Set(task.key, &positionEntry{pos: pos, item: task})
	}
}

func (tw *TimingWheel) moveTask(task baseEntry) {
	val, ok := tw.timers.Get(task.key)
	if !ok {
		return
	}
	timer := val.(*positionEntry)
	if task.delay < tw.interval {
		go tw.execute(timer.item.key, timer.item.value)
		return
	}
	pos, circle := tw.getPositionAndCircle(task.delay)
	if pos >= timer.pos {
		timer.item.circle = circle
		timer.item.diff = pos - timer.pos
	} else if circle > 0 {
		circle--
		timer.item.circle = circle
		timer.item.diff = tw.numSlots + pos - timer.pos
	} else {
		timer.item.removed = true
		newItem := &timingEntry{baseEntry: task, value: timer.item.value}
		tw.slots[pos].PushBack(newItem)
		tw.timers.Set(task.key, &positionEntry{pos: pos, item: newItem})
	}
}

func (tw *TimingWheel) removeTask(key any) {
	val, ok := tw.timers.Get(key)
	if !ok {
		return
	}
	val.(*positionEntry).item.removed = true
	tw.timers.Del(key)
}

func (tw *TimingWheel) onTick() {
	tw.tickedPos = (tw.tickedPos + 1) % tw.numSlots
	l := tw.slots[tw.tickedPos]
	var tasks []timingTask
	for e := l.Front(); e != nil; {
		task := e.Value.(*timingEntry)
		if task.removed {
			next := e.Next()
			l.Remove(e)
			e = next
			continue
		} else if task.circle > 0 {
			task.circle--
			e = e.Next()
			continue
		} else if task.diff > 0 {
			next := e.Next()
			l.Remove(e)
			pos := (tw.tickedPos + task.diff) % tw.numSlots
			tw.slots[pos].PushBack(task)
			tw.timers.Set(task.key, &positionEntry{pos: pos, item: task})
			task.diff = 0
			e = next
			continue
		}
		tasks = append(tasks, timingTask{key: task.key, value: task.value})
		next := e.Next()
		l.Remove(e)
		tw.timers.Del(task.key)
		e = next
	}
	for _, t := range tasks {
		go tw.execute(t.key, t.value)
	}
}

// ---- Cache (go-zero core/collection/cache.go), no limit ----

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
	c.timingWheel = NewTimingWheel(time.Second, 300, func(k, v any) {
		key, ok := k.(string)
		if !ok {
			return
		}
		c.Del(key)
	})
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
