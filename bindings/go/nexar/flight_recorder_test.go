package nexar_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// FlightRecorderDump writes JSON listing the collective that ran.
func TestFlightRecorderDumpListsTheCollective(t *testing.T) {
	comms := world(t, 1)
	buf := []float64{1, 2}
	if err := nexar.AllReduce(context.Background(), comms[0], buf, nexar.Sum); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fr.json")
	if err := comms[0].FlightRecorderDump(path); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Communicators []struct {
			Rank       int `json:"rank"`
			Operations []struct {
				Op      string `json:"op"`
				CollSeq int    `json:"coll_seq"`
				Count   int    `json:"count"`
				State   string `json:"state"`
			} `json:"operations"`
		} `json:"communicators"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, raw)
	}
	if len(doc.Communicators) != 1 || len(doc.Communicators[0].Operations) != 1 {
		t.Fatalf("want one communicator with one operation: %s", raw)
	}
	op := doc.Communicators[0].Operations[0]
	if op.Op != "allreduce" || op.CollSeq != 1 || op.Count != 2 || op.State != "completed" {
		t.Fatalf("unexpected entry %+v", op)
	}
}
