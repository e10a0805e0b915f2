// SPDX-License-Identifier: MIT

// W8's runner half, peer: go-zero's TimingWheel (core/collection/timingwheel.go
// and its SafeMap), RE-IMPLEMENTED here from its published design because no
// Go modules can be fetched on the benchmark machines. It keeps every part of
// that design that decides its cost:
//   - one goroutine (run) owns the wheel; SetTimer / MoveTimer / RemoveTimer
//     send their request on an unbuffered channel and return once run has
//     received it (so a caller waits for the loop, but not for the result);
//   - a one-level wheel of numSlots container/list lists, a circle count per
//     timer for delays beyond one revolution, and a diff field for lazy moves;
//   - a SafeMap (RWMutex over two Go maps that migrate after many deletions)
//     from key (interface{}) to *positionEntry;
//   - one tick (time.Ticker) scans one slot, and due tasks run in a new
//     goroutine per tick.
//
// Names follow go-zero's so the two can be read side by side. The driver
// below runs the same workload as bench/w8_runner.c, from the same
// precomputed stream (same splitmix64 generator and seed).
//
// Usage: gozero_tw SECONDS PRODUCERS [SLOTS (default 10000)]
// Output: "csv,w8,gozero,P,SLOTS,ops_per_s,p50_ms,p99_ms,max_ms,fires,0"
package main

import (
	"container/list"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ---- go-zero's SafeMap (core/collection/safemap.go), re-implemented ----

const (
	copyThreshold = 1000
	maxDeletion   = 10000
)

type SafeMap struct {
	lock        sync.RWMutex
	deletionOld int
	deletionNew int
	dirtyOld    map[any]any
	dirtyNew    map[any]any
}

func NewSafeMap() *SafeMap {
	return &SafeMap{dirtyOld: make(map[any]any), dirtyNew: make(map[any]any)}
}

func (m *SafeMap) Del(key any) {
	m.lock.Lock()
	if _, ok := m.dirtyOld[key]; ok {
		delete(m.dirtyOld, key)
		m.deletionOld++
	} else if _, ok := m.dirtyNew[key]; ok {
		delete(m.dirtyNew, key)
		m.deletionNew++
	}
	if m.deletionOld >= maxDeletion && len(m.dirtyOld) < copyThreshold {
		for k, v := range m.dirtyOld {
			m.dirtyNew[k] = v
		}
		m.dirtyOld = m.dirtyNew
		m.deletionOld = m.deletionNew
		m.dirtyNew = make(map[any]any)
		m.deletionNew = 0
	}
	if m.deletionNew >= maxDeletion && len(m.dirtyNew) < copyThreshold {
		for k, v := range m.dirtyNew {
			m.dirtyOld[k] = v
		}
		m.dirtyNew = make(map[any]any)
		m.deletionNew = 0
	}
	m.lock.Unlock()
}

func (m *SafeMap) Get(key any) (any, bool) {
	m.lock.RLock()
	defer m.lock.RUnlock()
	if val, ok := m.dirtyOld[key]; ok {
		return val, true
	}
	val, ok := m.dirtyNew[key]
	return val, ok
}

func (m *SafeMap) Set(key, value any) {
	m.lock.Lock()
	if m.deletionOld <= maxDeletion {
		if _, ok := m.dirtyNew[key]; ok {
			delete(m.dirtyNew, key)
			m.deletionNew++
		}
		m.dirtyOld[key] = value
	} else {
		if _, ok := m.dirtyOld[key]; ok {
			delete(m.dirtyOld, key)
			m.deletionOld++
		}
		m.dirtyNew[key] = value
	}
	m.lock.Unlock()
}

// ---- go-zero's TimingWheel, re-implemented ----

var (
	ErrClosed   = errors.New("TimingWheel is closed already")
	ErrArgument = errors.New("incorrect task argument")
)

type (
	Execute func(key, value any)

	TimingWheel struct {
		interval      time.Duration
		ticker        *time.Ticker
		slots         []*list.List
		timers        *SafeMap
		tickedPos     int
		numSlots      int
		execute       Execute
		setChannel    chan timingEntry
		moveChannel   chan baseEntry
		removeChannel chan any
		drainChannel  chan func(key, value any)
		stopChannel   chan struct{}
	}

	timingEntry struct {
		baseEntry
		value   any
		circle  int
		diff    int
		removed bool
	}

	baseEntry struct {
		delay time.Duration
		key   any
	}

	positionEntry struct {
		pos  int
		item *timingEntry
	}

	timingTask struct {
		key   any
		value any
	}
)

func NewTimingWheel(interval time.Duration, numSlots int, execute Execute) (*TimingWheel, error) {
	if interval <= 0 || numSlots <= 0 || execute == nil {
		return nil, fmt.Errorf("interval: %v, slots: %d, execute: %p", interval, numSlots, execute)
	}
	tw := &TimingWheel{
		interval:      interval,
		ticker:        time.NewTicker(interval),
		slots:         make([]*list.List, numSlots),
		timers:        NewSafeMap(),
		tickedPos:     numSlots - 1, // at previous virtual circle
		execute:       execute,
		numSlots:      numSlots,
		setChannel:    make(chan timingEntry),
		moveChannel:   make(chan baseEntry),
		removeChannel: make(chan any),
		drainChannel:  make(chan func(key, value any)),
		stopChannel:   make(chan struct{}),
	}
	for i := 0; i < numSlots; i++ {
		tw.slots[i] = list.New()
	}
	go tw.run()
	return tw, nil
}

func (tw *TimingWheel) MoveTimer(key any, delay time.Duration) error {
	if delay <= 0 || key == nil {
		return ErrArgument
	}
	select {
	case tw.moveChannel <- baseEntry{delay: delay, key: key}:
		return nil
	case <-tw.stopChannel:
		return ErrClosed
	}
}

func (tw *TimingWheel) RemoveTimer(key any) error {
	if key == nil {
		return ErrArgument
	}
	select {
	case tw.removeChannel <- key:
		return nil
	case <-tw.stopChannel:
		return ErrClosed
	}
}

func (tw *TimingWheel) SetTimer(key, value any, delay time.Duration) error {
	if delay <= 0 || key == nil {
		return ErrArgument
	}
	select {
	case tw.setChannel <- timingEntry{baseEntry: baseEntry{delay: delay, key: key}, value: value}:
		return nil
	case <-tw.stopChannel:
		return ErrClosed
	}
}

func (tw *TimingWheel) Stop() {
	close(tw.stopChannel)
}

func (tw *TimingWheel) drainAll(fn func(key, value any)) {
	runner := func(key, value any) { fn(key, value) }
	for _, slot := range tw.slots {
		for e := slot.Front(); e != nil; {
			task := e.Value.(*timingEntry)
			next := e.Next()
			slot.Remove(e)
			e = next
			if !task.removed {
				go runner(task.key, task.value)
			}
		}
	}
}

func (tw *TimingWheel) getPositionAndCircle(d time.Duration) (pos, circle int) {
	steps := int(d / tw.interval)
	pos = (tw.tickedPos + steps) % tw.numSlots
	circle = (steps - 1) / tw.numSlots
	return
}

func (tw *TimingWheel) initSlots() {
	for i := 0; i < tw.numSlots; i++ {
		tw.slots[i] = list.New()
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
		tw.setTimerPosition(pos, newItem)
	}
}

func (tw *TimingWheel) onTick() {
	tw.tickedPos = (tw.tickedPos + 1) % tw.numSlots
	l := tw.slots[tw.tickedPos]
	tw.scanAndRunTasks(l)
}

func (tw *TimingWheel) removeTask(key any) {
	val, ok := tw.timers.Get(key)
	if !ok {
		return
	}
	timer := val.(*positionEntry)
	timer.item.removed = true
	tw.timers.Del(key)
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
		case fn := <-tw.drainChannel:
			tw.drainAll(fn)
		case <-tw.stopChannel:
			tw.ticker.Stop()
			return
		}
	}
}

func (tw *TimingWheel) runTasks(tasks []timingTask) {
	if len(tasks) == 0 {
		return
	}
	go func() {
		for i := range tasks {
			tw.execute(tasks[i].key, tasks[i].value)
		}
	}()
}

func (tw *TimingWheel) scanAndRunTasks(l *list.List) {
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
			// (tw.tickedPos+task.diff)%tw.numSlots
			// cannot be the same value of tw.tickedPos
			pos := (tw.tickedPos + task.diff) % tw.numSlots
			tw.slots[pos].PushBack(task)
			tw.setTimerPosition(pos, task)
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
	tw.runTasks(tasks)
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
		tw.setTimerPosition(pos, task)
	}
}

func (tw *TimingWheel) setTimerPosition(pos int, task *timingEntry) {
	if val, ok := tw.timers.Get(task.key); ok {
		timer := val.(*positionEntry)
		timer.item = task
		timer.pos = pos
	} else {
		tw.timers.Set(task.key, &positionEntry{pos: pos, item: task})
	}
}

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
