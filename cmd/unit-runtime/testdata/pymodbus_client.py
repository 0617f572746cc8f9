"""pymodbus's own Modbus TCP client: `PORT read ADDR COUNT` prints the
holding registers, `PORT write ADDR VALUE` writes one."""
import sys

from pymodbus.client import ModbusTcpClient

port, op, addr, arg = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
client = ModbusTcpClient("127.0.0.1", port=port)
if not client.connect():
    sys.exit("cannot connect to 127.0.0.1:%d" % port)
if op == "read":
    r = client.read_holding_registers(addr, arg, slave=1)
elif op == "write":
    r = client.write_register(addr, arg, slave=1)
else:
    sys.exit("op %r: must be read or write" % op)
client.close()
if r.isError():
    sys.exit(str(r))
if op == "read":
    print(" ".join(str(v) for v in r.registers))
