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

// selfCPU returns this process's CPU time so far (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
