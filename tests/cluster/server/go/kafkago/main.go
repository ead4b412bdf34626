// A kafka-go (Debian's golang-github-segmentio-kafka-go-dev, 0.2.1) client
// for tests/cluster/server/test_foreign_clients_e2e.py: a Writer produces -n
// messages with RequiredAcks -1 (acks=all), message i to partition
// i % -partitions, then one Reader per partition reads it from FirstOffset
// until all of them are back. Prints one JSON summary on stdout (consumed
// offsets and values per partition); exits non-zero on any error, including
// one that the Writer or a Reader only logged and retried, a timeout or a
// mismatch. kafka-go's logs go to stderr.
//
// Built offline in GOPATH mode from /usr/share/gocode (no modules).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

type partitionResult struct {
	ConsumedOffsets []int64  `json:"consumed_offsets"`
	Values          []string `json:"values"`
}

type summary struct {
	Client      string                   `json:"client"`
	Topic       string                   `json:"topic"`
	Produced    int                      `json:"produced"`
	Consumed    int                      `json:"consumed"`
	Partitions  map[int]*partitionResult `json:"partitions"`
	ProduceSecs float64                  `json:"produce_secs"`
	ConsumeSecs float64                  `json:"consume_secs"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

// An empty long poll: a Fetch answered without records after its MaxWait,
// which kafka-go's batch.go reports to the error log as RequestTimedOut
// although the broker answered no error (this program's last read of each
// partition, which must find nothing, always ends so).
const emptyPoll = "no messages received from kafka within the allocated time"

// errorLog counts what kafka-go logs as an error (it retries those itself),
// except empty long polls.
type errorLog struct{ n int64 }

func (e *errorLog) Write(b []byte) (int, error) {
	if !strings.Contains(string(b), emptyPoll) {
		atomic.AddInt64(&e.n, 1)
	}
	return os.Stderr.Write(append([]byte("[kafka-go ERROR] "), b...))
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated host:port list")
	topic := flag.String("topic", "", "topic (must exist)")
	partitions := flag.Int("partitions", 1, "the topic's partition count")
	n := flag.Int("n", 1000, "messages to produce")
	prefix := flag.String("prefix", "kafkago", "value prefix: values are <prefix>-<i>")
	timeout := flag.Duration("timeout", 60*time.Second, "for producing, and again for consuming")
	ca := flag.String("ca", "", "TLS: the CA certificate (PEM) that signed the brokers'")
	flag.Parse()
	if *brokers == "" || *topic == "" || *partitions < 1 {
		fail("-brokers, -topic and -partitions are required")
	}
	addrs := strings.Split(*brokers, ",")
	dialer := &kafka.Dialer{Timeout: 10 * time.Second}
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			fail("-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fail("-ca %s: no PEM certificate", *ca)
		}
		// This kafka-go does not name the server per connection: the first
		// broker's host stands for all (in the tests they share 127.0.0.1).
		host := strings.Split(addrs[0], ":")[0]
		dialer.TLS = &tls.Config{RootCAs: pool, ServerName: host}
	}
	errs := &errorLog{}
	errLogger := log.New(errs, "", log.Lmicroseconds)

	res := summary{Client: "kafka-go", Topic: *topic, Partitions: map[int]*partitionResult{}}
	want := map[int][]string{}
	msgs := make([]kafka.Message, *n)
	for p := 0; p < *partitions; p++ {
		res.Partitions[p] = &partitionResult{ConsumedOffsets: []int64{}, Values: []string{}}
	}
	for i := 0; i < *n; i++ {
		v := fmt.Sprintf("%s-%d", *prefix, i)
		want[i%*partitions] = append(want[i%*partitions], v)
		msgs[i] = kafka.Message{Key: []byte(strconv.Itoa(i)), Value: []byte(v)}
	}

	// Produce: message i (its key) to partition i % partitions.
	t0 := time.Now()
	w := kafka.NewWriter(kafka.WriterConfig{
		Brokers: addrs, Topic: *topic, RequiredAcks: -1, BatchSize: 100, Dialer: dialer,
		BatchTimeout: 10 * time.Millisecond, ErrorLogger: errLogger,
		Balancer: kafka.BalancerFunc(func(m kafka.Message, parts ...int) int {
			i, err := strconv.Atoi(string(m.Key))
			if err != nil || len(parts) != *partitions {
				fail("balancer: key %q, partitions %v", m.Key, parts)
			}
			return parts[i%*partitions]
		}),
	})
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		fail("WriteMessages: %v", err)
	}
	cancel()
	if err := w.Close(); err != nil {
		fail("writer close: %v", err)
	}
	res.Produced = *n
	res.ProduceSecs = time.Since(t0).Seconds()

	// Consume every partition from its first offset.
	t1 := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	for p := 0; p < *partitions; p++ {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: addrs, Topic: *topic, Partition: p, MinBytes: 1, MaxBytes: 1 << 20, Dialer: dialer,
			MaxWait: 200 * time.Millisecond, ErrorLogger: errLogger,
		})
		if err := r.SetOffset(kafka.FirstOffset); err != nil {
			fail("SetOffset: %v", err)
		}
		pr := res.Partitions[p]
		for len(pr.Values) < len(want[p]) {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				fail("partition %d: %d of %d read: %v", p, len(pr.Values), len(want[p]), err)
			}
			if m.Partition != p {
				fail("partition %d: a message of partition %d", p, m.Partition)
			}
			pr.ConsumedOffsets = append(pr.ConsumedOffsets, m.Offset)
			pr.Values = append(pr.Values, string(m.Value))
			res.Consumed++
		}
		// Nothing more may come.
		extra, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
		if m, err := r.ReadMessage(extra); err == nil {
			fail("partition %d: an unexpected message at offset %d: %q", p, m.Offset, m.Value)
		}
		stop()
		if err := r.Close(); err != nil {
			fail("reader close: %v", err)
		}
	}
	res.ConsumeSecs = time.Since(t1).Seconds()

	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	if k := atomic.LoadInt64(&errs.n); k > 0 {
		fail("kafka-go logged %d errors (stderr)", k)
	}
	for p := 0; p < *partitions; p++ {
		pr := res.Partitions[p]
		if len(pr.Values) != len(want[p]) {
			fail("partition %d: %d consumed, %d produced", p, len(pr.Values), len(want[p]))
		}
		for i, v := range want[p] {
			if pr.Values[i] != v || pr.ConsumedOffsets[i] != int64(i) {
				fail("partition %d: mismatch at index %d (want %q at offset %d)", p, i, v, i)
			}
		}
	}
}
