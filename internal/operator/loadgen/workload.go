package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A Workload is the shape of the requests a run sends: one domain, and
// descriptors whose entries' values are drawn afresh for every request.
type Workload struct {
	Domain string
	// Hits is the request's cost per descriptor (ratelimit.v1 hits, Envoy
	// hits_addend); 0 sends none, which the server reads as 1.
	Hits        uint32
	Descriptors []Descriptor
}

// A Descriptor is one descriptor of every request.
type Descriptor struct {
	Entries []Entry
	// Hits, when set, is this descriptor's own cost (ratelimit.v1
	// descriptors[].hits, Envoy descriptors[].hits_addend); 0 is a peek on
	// ratelimit.v1 and a check on Envoy's API.
	Hits *uint32
}

// An Entry is a key and how its value is chosen.
type Entry struct {
	Key   string
	Value Value
}

// ParseDescriptor parses a descriptor written KEY=VALUE[,KEY=VALUE...], most
// general entry first, each VALUE a template (see Value):
//
//	path=/orders,user=user-{1..100000:zipf}
//
// A value holds no comma; it may hold '=' (the key ends at the first).
func ParseDescriptor(s string) (Descriptor, error) {
	if s == "" {
		return Descriptor{}, errors.New("descriptor: empty; want KEY=VALUE[,KEY=VALUE...]")
	}
	var d Descriptor
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" {
			return Descriptor{}, fmt.Errorf("descriptor %q: entry %q: want KEY=VALUE", s, part)
		}
		val, err := ParseValue(v)
		if err != nil {
			return Descriptor{}, fmt.Errorf("descriptor %q: %w", s, err)
		}
		d.Entries = append(d.Entries, Entry{Key: k, Value: val})
	}
	return d, nil
}

// String returns d in the form ParseDescriptor reads (with a trailing
// " hits=N" when d has its own cost).
func (d Descriptor) String() string {
	parts := make([]string, len(d.Entries))
	for i, e := range d.Entries {
		parts[i] = e.Key + "=" + e.Value.String()
	}
	s := strings.Join(parts, ",")
	if d.Hits != nil {
		s += fmt.Sprintf(" hits=%d", *d.Hits)
	}
	return s
}

// Validate reports the first problem that would make every request of w
// invalid: no domain, no descriptors, a descriptor without entries or an
// entry without a key.
func (w *Workload) Validate() error {
	if w.Domain == "" {
		return errors.New("workload: domain: must not be empty")
	}
	if len(w.Descriptors) == 0 {
		return errors.New("workload: at least one descriptor is needed")
	}
	for i, d := range w.Descriptors {
		if len(d.Entries) == 0 {
			return fmt.Errorf("workload: descriptors[%d]: no entries", i)
		}
		for j, e := range d.Entries {
			if e.Key == "" {
				return fmt.Errorf("workload: descriptors[%d].entries[%d]: key must not be empty", i, j)
			}
		}
	}
	return nil
}

// workloadFile is the YAML form of a Workload:
//
//	domain: default
//	hits: 1                      # optional
//	descriptors:
//	  - entries:
//	      - {key: path, value: /orders}
//	      - {key: user, value: "user-{1..100000:zipf}"}
//	    hits: 2                  # optional, this descriptor's own cost
type workloadFile struct {
	Domain      string `yaml:"domain"`
	Hits        uint32 `yaml:"hits"`
	Descriptors []struct {
		Entries []struct {
			Key   string `yaml:"key"`
			Value string `yaml:"value"`
		} `yaml:"entries"`
		Hits *uint32 `yaml:"hits"`
	} `yaml:"descriptors"`
}

// ParseWorkload reads a workload from YAML (see LoadWorkload). name is
// used in error messages.
func ParseWorkload(name string, data []byte) (*Workload, error) {
	var f workloadFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	w := &Workload{Domain: f.Domain, Hits: f.Hits}
	for i, fd := range f.Descriptors {
		d := Descriptor{Hits: fd.Hits}
		for j, fe := range fd.Entries {
			v, err := ParseValue(fe.Value)
			if err != nil {
				return nil, fmt.Errorf("%s: descriptors[%d].entries[%d]: %w", name, i, j, err)
			}
			d.Entries = append(d.Entries, Entry{Key: fe.Key, Value: v})
		}
		w.Descriptors = append(w.Descriptors, d)
	}
	if err := w.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return w, nil
}

// LoadWorkload reads a workload from a YAML file:
//
//	domain: default
//	hits: 1                      # optional: the request's cost per descriptor
//	descriptors:                 # every request sends all of them, in order
//	  - entries:
//	      - {key: path, value: /orders}
//	      - {key: user, value: "user-{1..100000:zipf}"}
//	    hits: 2                  # optional: this descriptor's own cost; 0 is a peek
//
// Values are templates (see Value). Unknown fields are errors.
func LoadWorkload(path string) (*Workload, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseWorkload(path, data)
}

// request is one request drawn from a workload, before it is put in an
// API's messages.
type request struct {
	domain      string
	hits        uint32
	descriptors []requestDescriptor
}

type requestDescriptor struct {
	entries []requestEntry
	hits    *uint32
}

type requestEntry struct{ key, value string }

// sampler draws a workload's requests from one random stream; it is not
// safe for concurrent use.
type sampler struct {
	w       *Workload
	drawers [][]*drawer
}

// newSampler returns a sampler whose stream is determined by (seed,
// stream): the same pair draws the same requests.
func (w *Workload) newSampler(seed, stream uint64) *sampler {
	r := rand.New(rand.NewPCG(seed, stream))
	s := &sampler{w: w, drawers: make([][]*drawer, len(w.Descriptors))}
	for i, d := range w.Descriptors {
		s.drawers[i] = make([]*drawer, len(d.Entries))
		for j, e := range d.Entries {
			s.drawers[i][j] = e.Value.drawer(r)
		}
	}
	return s
}

func (s *sampler) next() request {
	req := request{domain: s.w.Domain, hits: s.w.Hits, descriptors: make([]requestDescriptor, len(s.w.Descriptors))}
	for i, d := range s.w.Descriptors {
		entries := make([]requestEntry, len(d.Entries))
		for j, e := range d.Entries {
			entries[j] = requestEntry{key: e.Key, value: s.drawers[i][j].next()}
		}
		req.descriptors[i] = requestDescriptor{entries: entries, hits: d.Hits}
	}
	return req
}
