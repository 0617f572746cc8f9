// Command device-simulator is a Modbus TCP or OPC UA field device for
// tests, drills and the demo (package test/devicesim): holding registers,
// in owner-epoch mode a block (an OPC UA node) that refuses writers behind
// the highest epoch seen, in plain mode none, and a write log (true time
// and peer of every write) served over HTTP and appended to a file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/holdfast-io/holdfast/internal/version"
	"github.com/holdfast-io/holdfast/test/devicesim"
)

func main() {
	fs := flag.NewFlagSet("device-simulator", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: device-simulator [flags]

A Modbus TCP (or OPC UA) device simulator. Holding registers 0..65535;
every write is logged with its peer and true time.

--mode owner-epoch: registers EPOCH..EPOCH+3 are the owner-epoch block
(big-endian uint64): a client declares its epoch by writing all four, a
declaration below the highest epoch seen is refused, and every write on a
connection whose epoch is behind the highest is refused with exception 0x06
and logged.
--mode plain: every write is accepted, as by most plant devices.

--protocol opcua: an OPC UA server (security None, anonymous) at --listen
(opc.tcp://HOST:PORT): register N is the UInt16 variable ns=1;s=HRN, and in
owner-epoch mode the owner-epoch block is the Int64 variable ns=1;s=OwnerEpoch
(a declaration is a write of it; refusals are Bad_UserAccessDenied).

HTTP endpoint (--http):
  GET  /writes                     the write log, JSON
  GET  /registers?addr=N&count=M   register values, JSON
  PUT  /registers?addr=N&value=V   set a register as the plant would
  GET  /epoch                      the highest epoch seen
  POST /reads-failing?fail=BOOL    make every read fail (exception 0x04)

Flags:
`)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:5020", "the device's address to listen on (host:port)")
	protocol := fs.String("protocol", string(devicesim.Modbus), "modbus (Modbus TCP) or opcua (OPC UA, security None)")
	mode := fs.String("mode", string(devicesim.OwnerEpoch), "owner-epoch (refuse writers behind the highest epoch declared) or plain (accept every write)")
	httpAddr := fs.String("http", "127.0.0.1:5080", "HTTP address of the write log and control endpoint; empty disables it")
	epochRegister := fs.Uint("epoch-register", devicesim.DefaultEpochRegister, "first of the four owner-epoch registers")
	logFile := fs.String("write-log", "", "append every write to this file as JSON lines")
	showVersion := version.Flag(fs)
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		version.Print(os.Stdout, "device-simulator")
		return
	}
	if *epochRegister > 65532 {
		fmt.Fprintln(os.Stderr, "--epoch-register: must be at most 65532")
		os.Exit(2)
	}
	m, err := devicesim.ParseMode(*mode)
	if err != nil {
		fmt.Fprintf(os.Stderr, "--mode: %v\n", err)
		os.Exit(2)
	}

	p, err := devicesim.ParseProtocol(*protocol)
	if err != nil {
		fmt.Fprintf(os.Stderr, "--protocol: %v\n", err)
		os.Exit(2)
	}

	sim, err := devicesim.Start(devicesim.Config{Address: *listen, Protocol: p, Mode: m, EpochRegister: uint16(*epochRegister), LogFile: *logFile})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("device-simulator: %s (%s) listening on %s\n", p, m, sim.Addr())
	var srv *http.Server
	if *httpAddr != "" {
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "--http: %v\n", err)
			os.Exit(1)
		}
		srv = &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
		fmt.Printf("device-simulator: http listening on %s\n", ln.Addr())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	if srv != nil {
		_ = srv.Close()
	}
	_ = sim.Close()
}
