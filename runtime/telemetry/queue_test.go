package telemetry

import (
	"bytes"
	"testing"

	"github.com/eclipse/paho.golang/paho"
)

func enqueue(t *testing.T, q *Queue, topic string) {
	t.Helper()
	var b bytes.Buffer
	if _, err := (&paho.Publish{Topic: topic, QoS: 1}).Packet().WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(&b); err != nil {
		t.Fatal(err)
	}
}

func topics(q *Queue) []string {
	var out []string
	for _, m := range q.Messages() {
		out = append(out, m.Topic)
	}
	return out
}

// The queue is FIFO, keeps the newest when full, and never evicts the
// entry being sent (whose Remove must then remove that entry, not another).
func TestQueueIsFIFOAndEvictsTheOldestNotTheOneBeingSent(t *testing.T) {
	q := NewQueue(3)
	for _, tp := range []string{"a", "b", "c"} {
		enqueue(t, q, tp)
	}
	select {
	case <-q.Wait():
	default:
		t.Fatal("Wait on a non-empty queue is not closed")
	}
	e, err := q.Peek() // "a" is being sent
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, q, "d") // full: evicts "b", the oldest not in flight
	if got := topics(q); len(got) != 3 || got[0] != "a" || got[1] != "c" || got[2] != "d" {
		t.Fatalf("queue %v, want [a c d]", got)
	}
	if err := e.Remove(); err != nil {
		t.Fatal(err)
	}
	if got := topics(q); len(got) != 2 || got[0] != "c" || got[1] != "d" {
		t.Fatalf("queue after sending a: %v, want [c d]", got)
	}
	enqueue(t, q, "e")
	enqueue(t, q, "f") // nothing in flight: evicts "c"
	if got := topics(q); got[0] != "d" || q.Evicted() != 2 || q.Len() != 3 {
		t.Fatalf("queue %v evicted %d, want [d e f] and 2 evicted", got, q.Evicted())
	}
}
