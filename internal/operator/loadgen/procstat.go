package loadgen

import (
	"fmt"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// procSample is a process's CPU time (user + system, from /proc/PID/stat;
// the kernel counts it in ticks of 10ms) and resident memory at an instant.
type procSample struct {
	cpu time.Duration
	rss int64
}

// sampleProc reads /proc/PID/stat.
func sampleProc(pid int) (procSample, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procSample{}, fmt.Errorf("server process %d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return procSample{}, fmt.Errorf("server process %d: %w", pid, err)
	}
	return procSample{
		cpu: time.Duration(st.CPUTime() * float64(time.Second)),
		rss: int64(st.ResidentMemory()),
	}, nil
}

// procWatch follows the server's processes over the measured window.
type procWatch struct {
	pids    []int
	names   []string
	before  []procSample
	peak    []int64
	started bool
}

// watchProcs returns a watch on pids, or an error naming one that cannot
// be read.
func watchProcs(pids []int) (*procWatch, error) {
	w := &procWatch{pids: pids, names: make([]string, len(pids)), before: make([]procSample, len(pids)), peak: make([]int64, len(pids))}
	for i, pid := range pids {
		if pid <= 0 {
			return nil, fmt.Errorf("server process %d: not a process id", pid)
		}
		if _, err := sampleProc(pid); err != nil {
			return nil, err
		}
		if p, err := procfs.NewProc(pid); err == nil {
			w.names[i], _ = p.Comm()
		}
	}
	return w, nil
}

// start marks the window's start.
func (w *procWatch) start() {
	w.started = true
	for i, pid := range w.pids {
		if s, err := sampleProc(pid); err == nil {
			w.before[i], w.peak[i] = s, s.rss
		}
	}
}

// sample notes the processes' resident memory.
func (w *procWatch) sample() {
	for i, pid := range w.pids {
		if s, err := sampleProc(pid); err == nil {
			w.peak[i] = max(w.peak[i], s.rss)
		}
	}
}

// finish returns each process's use over the window, which lasted
// window and held requests requests.
func (w *procWatch) finish(requests int64, window time.Duration) ([]ServerStats, error) {
	var out []ServerStats
	for i, pid := range w.pids {
		after, err := sampleProc(pid)
		if err != nil {
			return nil, err
		}
		before := w.before[i]
		if !w.started { // interrupted in the warmup: nothing measured
			before = after
		}
		cpu := after.cpu - before.cpu
		s := ServerStats{PID: pid, Name: w.names[i], CPUSeconds: cpu.Seconds(), RSSBytes: after.rss, PeakRSSBytes: max(w.peak[i], after.rss)}
		if requests > 0 {
			s.CPUPerRequestUS = float64(cpu.Nanoseconds()) / 1e3 / float64(requests)
		}
		if window > 0 {
			s.CoresBusy = cpu.Seconds() / window.Seconds()
		}
		out = append(out, s)
	}
	return out, nil
}

// selfCPU returns this process's CPU time so far (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
