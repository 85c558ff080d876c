package daemon

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/store/memory"
	"github.com/ratelimitd/ratelimitd/internal/store/snapshot"
)

// DefaultSnapshotInterval is how often the memory store is written to
// Config.StateFile when Config.SnapshotInterval is 0.
const DefaultSnapshotInterval = 10 * time.Second

// snapshots keeps the memory store's buckets in Config.StateFile: loaded
// once at start, before the daemon serves, and written every interval
// while it runs and once more when it stops, after the last call.
type snapshots struct {
	store    *memory.Store
	path     string
	interval time.Duration
	log      *slog.Logger
	// loaded is set once load has run: until then nothing is written, so
	// that a start that fails before loading never replaces a good file
	// with an empty store.
	loaded atomic.Bool
	// writing serializes writes: the last one, on shutdown, may start
	// while the interval's is still under way, and both use path.tmp.
	writing sync.Mutex
	done    bool // the final snapshot was written; guarded by writing

	writes                      *prometheus.CounterVec
	lastTime, lastTook          prometheus.Gauge
	lastPause, lastBytes, lastN prometheus.Gauge
	loads                       *prometheus.CounterVec
	loadBuckets                 *prometheus.GaugeVec
	loadTook                    prometheus.Gauge
}

// The outcomes of loading a snapshot at start, the values of the outcome
// label of ratelimitd_snapshot_loads_total: loaded, missing (no file yet),
// the snapshot.Kind of a refused file (foreign, version, truncated,
// corrupt), or unreadable (the file could not be read at all).
var loadOutcomes = []string{"loaded", "missing", "foreign", "version", "truncated", "corrupt", "unreadable"}

func newSnapshots(st *memory.Store, path string, interval time.Duration, log *slog.Logger) *snapshots {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "ratelimitd_snapshot_" + name, Help: help})
	}
	s := &snapshots{
		store: st, path: path, interval: interval, log: log,
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_snapshot_writes_total",
			Help: "Snapshots of the memory store written to --state-file, by result (ok, error).",
		}, []string{"result"}),
		lastTime:  gauge("last_write_timestamp_seconds", "When the last snapshot that succeeded was written (Unix seconds)."),
		lastTook:  gauge("last_write_duration_seconds", "How long the last snapshot that succeeded took, fsyncs included."),
		lastPause: gauge("last_write_pause_seconds", "The longest one shard of the store was locked by the last snapshot: the longest a decision waited for it."),
		lastBytes: gauge("last_write_bytes", "The size of the last snapshot file written."),
		lastN:     gauge("last_write_buckets", "The number of buckets in the last snapshot written."),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_snapshot_loads_total",
			Help: "Snapshot loads at start, by outcome: loaded, missing, foreign, version, truncated, corrupt, unreadable. Anything but loaded and missing started the daemon empty.",
		}, []string{"outcome"}),
		loadBuckets: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratelimitd_snapshot_load_buckets",
			Help: "Buckets of the snapshot loaded at start, by what became of them: restored, at_rest (nothing to restore), dropped (limit gone or changed), full (over --max-memory or --max-buckets).",
		}, []string{"result"}),
		loadTook: gauge("load_duration_seconds", "How long loading the snapshot at start took."),
	}
	for _, r := range []string{"ok", "error"} {
		s.writes.WithLabelValues(r)
	}
	for _, o := range loadOutcomes {
		s.loads.WithLabelValues(o)
	}
	return s
}

func (s *snapshots) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.writes, s.lastTime, s.lastTook, s.lastPause, s.lastBytes, s.lastN, s.loads, s.loadBuckets, s.loadTook}
}

// load restores the buckets of the snapshot at the path into the store,
// as adopt converts them, keeping only those it accepts. It never fails: a missing
// file starts the store empty (a first start); a refused one is logged,
// counted, renamed aside (snapshot.SetAside) and the store starts empty.
func (s *snapshots) load(adopt memory.Adopt) {
	defer s.loaded.Store(true)
	start := time.Now()
	snap, err := snapshot.Read(s.path)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		s.loads.WithLabelValues("missing").Inc()
		s.log.Info("no snapshot yet; starting with no buckets", "state_file", s.path)
		return
	case snapshot.KindOf(err) != 0:
		s.loads.WithLabelValues(snapshot.KindOf(err).String()).Inc()
		aside, moveErr := snapshot.SetAside(s.path)
		if moveErr != nil {
			aside = "(not moved: " + moveErr.Error() + ")"
		}
		s.log.Error("snapshot refused; starting with no buckets", "state_file", s.path,
			"reason", snapshot.KindOf(err).String(), "err", err, "kept_as", aside)
		return
	default:
		s.loads.WithLabelValues("unreadable").Inc()
		s.log.Error("snapshot unreadable; starting with no buckets (the next snapshot replaces it)",
			"state_file", s.path, "err", err)
		return
	}
	r := s.store.Restore(snap, time.Now().UnixNano(), adopt)
	took := time.Since(start)
	s.loads.WithLabelValues("loaded").Inc()
	s.loadTook.Set(took.Seconds())
	for result, n := range map[string]int{"restored": r.Buckets, "at_rest": r.AtRest, "dropped": r.Dropped, "full": r.Full} {
		s.loadBuckets.WithLabelValues(result).Set(float64(n))
	}
	s.log.Info("snapshot loaded", "state_file", s.path, "restored", r.Buckets, "at_rest", r.AtRest,
		"dropped", r.Dropped, "full", r.Full, "written", time.Unix(0, snap.Wall).UTC().Format(time.RFC3339Nano),
		"took", took)
	if r.Lag > time.Second || r.Lag < -time.Second {
		s.log.Warn("the snapshot's clock disagreed with the wall clock (a clock step while the last process ran)",
			"lag", r.Lag, "moved_later", r.Lag > 0)
	}
}

// run writes a snapshot every interval until ctx ends.
func (s *snapshots) run(ctx context.Context) {
	every(ctx, s.interval, func() { s.write(false) })
}

// write writes one snapshot, if load has run; final says it is the one
// written on shutdown, which is logged at Info rather than Debug.
func (s *snapshots) write(final bool) {
	if !s.loaded.Load() {
		return
	}
	s.writing.Lock()
	defer s.writing.Unlock()
	if s.done {
		return // the final snapshot is written: an interval's write that lost the race to it writes nothing
	}
	s.done = final
	w, err := s.store.WriteSnapshot(s.path, time.Now().UnixNano())
	if err != nil {
		s.writes.WithLabelValues("error").Inc()
		s.log.Error("snapshot not written; the previous one stays", "state_file", s.path, "err", err)
		return
	}
	s.writes.WithLabelValues("ok").Inc()
	s.lastTime.Set(float64(time.Now().UnixNano()) / 1e9)
	s.lastTook.Set(w.Took.Seconds())
	s.lastPause.Set(w.Pause.Seconds())
	s.lastBytes.Set(float64(w.Bytes))
	s.lastN.Set(float64(w.Buckets))
	level := slog.LevelDebug
	if final {
		level = slog.LevelInfo
	}
	s.log.Log(context.Background(), level, "snapshot written", "state_file", s.path,
		"buckets", w.Buckets, "bytes", w.Bytes, "took", w.Took, "longest_pause", w.Pause)
}
