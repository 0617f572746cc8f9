//go:build integration || e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/holdfast-io/holdfast/api/lease"
)

// scrape reads one Prometheus metric with exactly the given labels (others
// free) and sums the matching series (a histogram's: its observation
// counts).
func scrape(hc *http.Client, url, name string, labels map[string]string) (float64, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	fam, ok := fams[name]
	if !ok {
		return 0, fmt.Errorf("%s: no metric %s", url, name)
	}
	var sum float64
	for _, m := range fam.Metric {
		match := true
		for k, v := range labels {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount()) // observations counted
		}
	}
	return sum, nil
}

func leaseStatus(hc *http.Client, url string) (lease.Status, error) {
	var st lease.Status
	resp, err := hc.Get(url)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}
