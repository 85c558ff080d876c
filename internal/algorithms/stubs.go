package algorithms

// Placeholders until the implementations land (issue 2).

func (l *Limit) fixedWindow(s State, now, cost int64) (State, Decision)   { panic("todo") }
func (l *Limit) slidingWindow(s State, now, cost int64) (State, Decision) { panic("todo") }
func (l *Limit) gcra(s State, now, cost int64) (State, Decision)          { panic("todo") }
