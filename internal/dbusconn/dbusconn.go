// Package dbusconn opens D-Bus connections the way the node plugin's
// systemd actuator and its test double both need them: to a bus named by
// address, authenticated as this process's uid.
package dbusconn

import (
	"os"
	"strconv"

	"github.com/godbus/dbus/v5"
)

// Dial opens a connection to the bus at address (unix:path=...), with
// EXTERNAL auth as this process's uid, and says Hello.
func Dial(address string) (*dbus.Conn, error) {
	conn, err := dbus.Dial(address)
	if err != nil {
		return nil, err
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, err
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}
