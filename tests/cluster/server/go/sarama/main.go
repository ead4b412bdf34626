// A sarama (Debian's golang-github-shopify-sarama-dev, 1.22) client for
// tests/cluster/server/test_foreign_clients_e2e.py: produce -n messages with
// acks=all (WaitForAll), message i to partition i % -partitions, then consume
// every partition from its oldest offset until all of them are back. Prints
// one JSON summary on stdout (acknowledged and consumed offsets and values
// per partition); exits non-zero on any error, timeout or mismatch. sarama's
// own log goes to stderr.
//
// Built offline in GOPATH mode from /usr/share/gocode (no modules).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/Shopify/sarama"
)

var versions = map[string]sarama.KafkaVersion{
	"0.10.0": sarama.V0_10_0_0,
	"0.11.0": sarama.V0_11_0_0,
	"1.0.0":  sarama.V1_0_0_0,
	"2.0.0":  sarama.V2_0_0_0,
}

type partitionResult struct {
	AckedOffsets    []int64  `json:"acked_offsets"`
	ConsumedOffsets []int64  `json:"consumed_offsets"`
	Values          []string `json:"values"`
}

type summary struct {
	Client       string                   `json:"client"`
	KafkaVersion string                   `json:"kafka_version"`
	Topic        string                   `json:"topic"`
	Produced     int                      `json:"produced"`
	Consumed     int                      `json:"consumed"`
	Partitions   map[int]*partitionResult `json:"partitions"`
	ProduceSecs  float64                  `json:"produce_secs"`
	ConsumeSecs  float64                  `json:"consume_secs"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated host:port list")
	topic := flag.String("topic", "", "topic (must exist)")
	partitions := flag.Int("partitions", 1, "the topic's partition count")
	n := flag.Int("n", 1000, "messages to produce")
	prefix := flag.String("prefix", "sarama", "value prefix: values are <prefix>-<i>")
	version := flag.String("version", "2.0.0", "sarama Config.Version: 0.10.0, 0.11.0, 1.0.0 or 2.0.0")
	timeout := flag.Duration("timeout", 60*time.Second, "for producing, and again for consuming")
	ca := flag.String("ca", "", "TLS: the CA certificate (PEM) that signed the brokers'")
	user := flag.String("sasl-user", "", "SASL/PLAIN (handshake v0): the user")
	passwordFile := flag.String("sasl-password-file", "", "SASL/PLAIN: a file holding the password")
	flag.Parse()
	if *brokers == "" || *topic == "" || *partitions < 1 {
		fail("-brokers, -topic and -partitions are required")
	}
	kv, ok := versions[*version]
	if !ok {
		fail("unknown -version %q", *version)
	}
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	addrs := strings.Split(*brokers, ",")

	cfg := sarama.NewConfig()
	cfg.Version = kv
	cfg.ClientID = "chaoslog-sarama"
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			fail("-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fail("-ca %s: no PEM certificate", *ca)
		}
		cfg.Net.TLS.Enable = true
		cfg.Net.TLS.Config = &tls.Config{RootCAs: pool}
	}
	if *user != "" {
		password, err := os.ReadFile(*passwordFile)
		if err != nil {
			fail("-sasl-password-file: %v", err)
		}
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		cfg.Net.SASL.User = *user
		cfg.Net.SASL.Password = strings.TrimSpace(string(password))
	}
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	cfg.Net.MaxOpenRequests = 1 // keeps each partition's order even across a retry
	cfg.Consumer.Return.Errors = true
	if err := cfg.Validate(); err != nil {
		fail("config: %v", err)
	}

	res := summary{Client: "sarama", KafkaVersion: kv.String(), Topic: *topic,
		Partitions: map[int]*partitionResult{}}
	want := map[int][]string{}
	for p := 0; p < *partitions; p++ {
		res.Partitions[p] = &partitionResult{AckedOffsets: []int64{}, ConsumedOffsets: []int64{},
			Values: []string{}}
	}
	for i := 0; i < *n; i++ {
		want[i%*partitions] = append(want[i%*partitions], fmt.Sprintf("%s-%d", *prefix, i))
	}

	// Produce.
	t0 := time.Now()
	producer, err := sarama.NewAsyncProducer(addrs, cfg)
	if err != nil {
		fail("NewAsyncProducer: %v", err)
	}
	go func() {
		for i := 0; i < *n; i++ {
			producer.Input() <- &sarama.ProducerMessage{Topic: *topic, Partition: int32(i % *partitions),
				Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", *prefix, i))}
		}
	}()
	deadline := time.After(*timeout)
	for acked := 0; acked < *n; {
		select {
		case m := <-producer.Successes():
			pr := res.Partitions[int(m.Partition)]
			pr.AckedOffsets = append(pr.AckedOffsets, m.Offset)
			acked++
		case e := <-producer.Errors():
			fail("produce: %v", e)
		case <-deadline:
			fail("produce: %d of %d acknowledged after %v", acked, *n, *timeout)
		}
	}
	if err := producer.Close(); err != nil {
		fail("producer close: %v", err)
	}
	res.Produced = *n
	res.ProduceSecs = time.Since(t0).Seconds()
	for _, pr := range res.Partitions {
		sort.Slice(pr.AckedOffsets, func(a, b int) bool { return pr.AckedOffsets[a] < pr.AckedOffsets[b] })
	}

	// Consume every partition from the oldest offset.
	t1 := time.Now()
	consumer, err := sarama.NewConsumer(addrs, cfg)
	if err != nil {
		fail("NewConsumer: %v", err)
	}
	deadline = time.After(*timeout)
	for p := 0; p < *partitions; p++ {
		pc, err := consumer.ConsumePartition(*topic, int32(p), sarama.OffsetOldest)
		if err != nil {
			fail("ConsumePartition %d: %v", p, err)
		}
		pr := res.Partitions[p]
		for len(pr.Values) < len(want[p]) {
			select {
			case m := <-pc.Messages():
				pr.ConsumedOffsets = append(pr.ConsumedOffsets, m.Offset)
				pr.Values = append(pr.Values, string(m.Value))
				res.Consumed++
			case e := <-pc.Errors():
				fail("consume partition %d: %v", p, e)
			case <-deadline:
				fail("consume: partition %d: %d of %d after %v", p, len(pr.Values), len(want[p]), *timeout)
			}
		}
		// Nothing more may come.
		select {
		case m := <-pc.Messages():
			fail("partition %d: an unexpected message at offset %d: %q", p, m.Offset, m.Value)
		case <-time.After(300 * time.Millisecond):
		}
		if err := pc.Close(); err != nil {
			fail("close partition consumer %d: %v", p, err)
		}
	}
	if err := consumer.Close(); err != nil {
		fail("consumer close: %v", err)
	}
	res.ConsumeSecs = time.Since(t1).Seconds()

	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	for p := 0; p < *partitions; p++ {
		pr := res.Partitions[p]
		if len(pr.Values) != len(want[p]) || len(pr.AckedOffsets) != len(want[p]) {
			fail("partition %d: %d acknowledged, %d consumed, %d produced", p,
				len(pr.AckedOffsets), len(pr.Values), len(want[p]))
		}
		for i, v := range want[p] {
			if pr.Values[i] != v || pr.ConsumedOffsets[i] != int64(i) || pr.AckedOffsets[i] != int64(i) {
				fail("partition %d: mismatch at index %d (want %q at offset %d)", p, i, v, i)
			}
		}
	}
}
