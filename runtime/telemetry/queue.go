package telemetry

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/eclipse/paho.golang/autopaho/queue"
	"github.com/eclipse/paho.golang/packets"
)

// Queue is the bounded FIFO store-and-forward queue the connection manager
// replays from when the broker answers. When it is full the oldest entry
// is evicted (never the one being sent), so a long outage keeps the newest
// publishes; every connect re-announces the current status, so an evicted
// status is told again.
type Queue struct {
	mu      sync.Mutex
	size    int
	entries []qentry
	nextID  uint64
	peeked  uint64 // id of the entry handed out by Peek, 0 when none
	waiting []chan struct{}
	evicted int
}

type qentry struct {
	id   uint64
	data []byte
}

// NewQueue holds at most size publishes.
func NewQueue(size int) *Queue { return &Queue{size: size} }

// Wait returns a channel closed when the queue holds something.
func (q *Queue) Wait() chan struct{} {
	c := make(chan struct{})
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.entries) > 0 {
		close(c)
		return c
	}
	q.waiting = append(q.waiting, c)
	return c
}

// Enqueue appends a publish packet, evicting the oldest when full.
func (q *Queue) Enqueue(p io.Reader) error {
	var b bytes.Buffer
	if _, err := b.ReadFrom(p); err != nil {
		return fmt.Errorf("telemetry queue: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.entries) >= q.size {
		i := 0
		if q.entries[0].id == q.peeked && len(q.entries) > 1 {
			i = 1
		}
		q.entries = append(q.entries[:i], q.entries[i+1:]...)
		q.evicted++
	}
	q.nextID++
	q.entries = append(q.entries, qentry{id: q.nextID, data: b.Bytes()})
	for _, c := range q.waiting {
		close(c)
	}
	q.waiting = nil
	return nil
}

// Peek returns the oldest entry without removing it.
func (q *Queue) Peek() (queue.Entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.entries) == 0 {
		return nil, queue.ErrEmpty
	}
	q.peeked = q.entries[0].id
	return &entry{q: q, e: q.entries[0]}, nil
}

// Len is the number of queued publishes.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.entries)
}

// Evicted counts publishes dropped because the queue was full.
func (q *Queue) Evicted() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.evicted
}

// Message is a queued publish, decoded.
type Message struct {
	Topic   string
	Payload []byte
	Retain  bool
	QoS     byte
}

// Messages decodes the queued publishes, oldest first.
func (q *Queue) Messages() []Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Message
	for _, e := range q.entries {
		p, err := packets.ReadPacket(bytes.NewReader(e.data))
		if err != nil {
			continue
		}
		if pub, ok := p.Content.(*packets.Publish); ok {
			out = append(out, Message{Topic: pub.Topic, Payload: pub.Payload, Retain: pub.Retain, QoS: pub.QoS})
		}
	}
	return out
}

func (q *Queue) remove(id uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.peeked == id {
		q.peeked = 0
	}
	for i, e := range q.entries {
		if e.id == id {
			q.entries = append(q.entries[:i], q.entries[i+1:]...)
			return
		}
	}
}

type entry struct {
	q *Queue
	e qentry
}

func (e *entry) Reader() (io.Reader, error) { return bytes.NewReader(e.e.data), nil }

func (e *entry) Leave() error {
	e.q.mu.Lock()
	defer e.q.mu.Unlock()
	if e.q.peeked == e.e.id {
		e.q.peeked = 0
	}
	return nil
}

func (e *entry) Remove() error {
	e.q.remove(e.e.id)
	if e.q.Len() == 0 {
		return queue.ErrEmpty
	}
	return nil
}

func (e *entry) Quarantine() error { return e.Remove() }
