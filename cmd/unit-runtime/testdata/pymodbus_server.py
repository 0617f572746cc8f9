"""A Modbus TCP server nobody on holdfast wrote: pymodbus's own, as Debian
ships it, serving 10000 holding registers on 127.0.0.1:PORT (argv[1])."""
import sys

from pymodbus.datastore import ModbusSequentialDataBlock, ModbusServerContext, ModbusSlaveContext
from pymodbus.server import StartTcpServer

store = ModbusSlaveContext(hr=ModbusSequentialDataBlock(0, [0] * 10000), zero_mode=True)
StartTcpServer(context=ModbusServerContext(slaves=store, single=True), address=("127.0.0.1", int(sys.argv[1])))
