package devicesim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Handler serves the device over HTTP for a test or drill running it as a
// process:
//
//	GET  /writes                      the write log (JSON array of Write)
//	GET  /registers?addr=N&count=M    register values (JSON array)
//	GET  /epoch                       the highest epoch seen ({"epoch": N})
//	POST /reads-failing?fail=true     make every read fail (or not)
//	PUT  /registers?addr=N&value=V    set a register as the plant would
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /writes", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, s.Writes())
	})
	mux.HandleFunc("GET /registers", func(w http.ResponseWriter, r *http.Request) {
		addr, err1 := strconv.ParseUint(r.URL.Query().Get("addr"), 10, 16)
		count, err2 := strconv.ParseUint(r.URL.Query().Get("count"), 10, 16)
		if err1 != nil || err2 != nil || count == 0 || addr+count > 65536 {
			http.Error(w, "addr and count: must name registers inside 0..65535", http.StatusBadRequest)
			return
		}
		writeJSON(w, s.Registers(uint16(addr), uint16(count)))
	})
	mux.HandleFunc("PUT /registers", func(w http.ResponseWriter, r *http.Request) {
		addr, err1 := strconv.ParseUint(r.URL.Query().Get("addr"), 10, 16)
		value, err2 := strconv.ParseUint(r.URL.Query().Get("value"), 10, 16)
		if err1 != nil || err2 != nil {
			http.Error(w, "addr and value: must be 0..65535", http.StatusBadRequest)
			return
		}
		s.SetRegister(uint16(addr), uint16(value))
	})
	mux.HandleFunc("GET /epoch", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]int64{"epoch": s.HighestEpoch()})
	})
	mux.HandleFunc("POST /reads-failing", func(w http.ResponseWriter, r *http.Request) {
		fail, err := strconv.ParseBool(r.URL.Query().Get("fail"))
		if err != nil {
			http.Error(w, fmt.Sprintf("fail: %q: must be true or false", r.URL.Query().Get("fail")), http.StatusBadRequest)
			return
		}
		s.SetReadsFailing(fail)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// FetchWrites reads the write log from a device simulator process's HTTP
// endpoint (base like http://127.0.0.1:8502).
func FetchWrites(c *http.Client, base string) ([]Write, error) {
	resp, err := c.Get(base + "/writes")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/writes: %s", base, resp.Status)
	}
	var out []Write
	return out, json.NewDecoder(resp.Body).Decode(&out)
}
