"""The Feetech STS3215 servo's serial protocol, as the SO-101's six servos speak it: the control
table's registers the SO-101 backend uses, the packet format, and the conversions between
register values and SI units. Shared by the backend (drivers/so101.py, which talks through
Feetech's own SDK, ``scservo_sdk``) and the simulated bus (drivers/so101_sim.py, which answers
as the servos would), so both read one table.

Packets (half duplex, 1 Mbaud on a real bus; every multi-byte value little-endian):

    instruction  FF FF ID LEN INST P1 .. Pn CHK     LEN = n + 2
    status       FF FF ID LEN ERR  P1 .. Pn CHK     ERR: the servo's error bits (ERROR_BITS)
    CHK = ~(ID + LEN + INST|ERR + P1 + .. + Pn) & 0xFF

Instructions: PING, READ (address, length), WRITE (address, data), SYNC_WRITE (broadcast:
address, length, then per servo its ID and data; no reply) and SYNC_READ (broadcast: address,
length, the IDs; each servo replies in turn). Positions are 12-bit encoder ticks, 4096 per turn.
Some registers hold sign-magnitude values (SIGN_BITS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HEADER = b"\xff\xff"
BROADCAST_ID = 0xFE
PING, READ, WRITE, REG_WRITE, ACTION, SYNC_READ, SYNC_WRITE = 0x01, 0x02, 0x03, 0x04, 0x05, 0x82, 0x83
STS3215_MODEL = 777
TICKS_PER_TURN = 4096
TICKS_PER_RAD = TICKS_PER_TURN / (2 * math.pi)
CENTRE_TICK = 2048

# (address, bytes) of the registers used here: a subset of the STS/SMS control table (EEPROM
# below 40, RAM from 40)
REGISTERS: dict[str, tuple[int, int]] = {
    "Model_Number": (3, 2),
    "ID": (5, 1),
    "Min_Position_Limit": (9, 2),
    "Max_Position_Limit": (11, 2),
    "Max_Temperature_Limit": (13, 1),
    "Max_Torque_Limit": (16, 2),
    "P_Coefficient": (21, 1),
    "Protection_Current": (28, 2),
    "Homing_Offset": (31, 2),
    "Operating_Mode": (33, 1),
    "Overload_Torque": (36, 1),
    "Torque_Enable": (40, 1),
    "Acceleration": (41, 1),
    "Goal_Position": (42, 2),
    "Goal_Time": (44, 2),
    "Goal_Velocity": (46, 2),
    "Torque_Limit": (48, 2),
    "Lock": (55, 1),
    "Present_Position": (56, 2),
    "Present_Velocity": (58, 2),
    "Present_Load": (60, 2),
    "Present_Voltage": (62, 1),
    "Present_Temperature": (63, 1),
    "Status": (65, 1),
    "Moving": (66, 1),
    "Present_Current": (69, 2),
}
TABLE_SIZE = 71
SIGN_BITS = {"Homing_Offset": 11, "Goal_Velocity": 15, "Present_Velocity": 15, "Present_Load": 10}

# the status packet's error byte (and the Status register): what each bit reports
ERROR_BITS = {0x01: "input voltage", 0x02: "angle sensor", 0x04: "overheat", 0x08: "overcurrent", 0x20: "overload"}
VELOCITY_TICK_S = 1.0  # Present_Velocity / Goal_Velocity unit: ticks per second (0.088 degrees/s)
LOAD_PER_MILLE = 1000  # Present_Load: per mille of the maximum torque
CURRENT_UNIT_MA = 6.5  # Present_Current unit
VOLTAGE_UNIT_V = 0.1  # Present_Voltage unit


def checksum(body: bytes) -> int:
    """~(sum of ID, LEN, INST|ERR and the parameters) & 0xFF."""
    return ~sum(body) & 0xFF


def instruction(servo_id: int, inst: int, params: bytes = b"") -> bytes:
    body = bytes([servo_id, len(params) + 2, inst]) + bytes(params)
    return HEADER + body + bytes([checksum(body)])


def status(servo_id: int, error: int, params: bytes = b"") -> bytes:
    body = bytes([servo_id, len(params) + 2, error]) + bytes(params)
    return HEADER + body + bytes([checksum(body)])


@dataclass
class Packet:
    servo_id: int
    code: int  # the instruction (instruction packets) or the error byte (status packets)
    params: bytes


class PacketReader:
    """Packets out of a byte stream: ``feed`` bytes, ``packets()`` yields the whole ones with a good
    checksum; a bad checksum is counted (``corrupt``) and its bytes skipped, as a servo ignores them."""

    def __init__(self):
        self.buffer = bytearray()
        self.corrupt = 0

    def feed(self, data: bytes) -> None:
        self.buffer.extend(data)

    def packets(self):
        while True:
            start = self.buffer.find(HEADER)
            if start < 0:
                del self.buffer[:-1]
                return
            del self.buffer[:start]
            if len(self.buffer) < 4:
                return
            length = self.buffer[3]
            if length < 2:
                del self.buffer[:2]
                continue
            total = 4 + length
            if len(self.buffer) < total:
                return
            body, check = bytes(self.buffer[2:total - 1]), self.buffer[total - 1]
            del self.buffer[:total]
            if checksum(body) != check:
                self.corrupt += 1
                continue
            yield Packet(body[0], body[2], body[3:])


def encode(name: str, value: int) -> bytes:
    """A register's value as its bytes (sign-magnitude where the register keeps a sign bit)."""
    size = REGISTERS[name][1]
    value = int(value)
    if name in SIGN_BITS and value < 0:
        value = -value | (1 << SIGN_BITS[name])
    return (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def decode(name: str, data: bytes) -> int:
    value = int.from_bytes(bytes(data), "little")
    if name in SIGN_BITS and value & (1 << SIGN_BITS[name]):
        value = -(value & ~(1 << SIGN_BITS[name]))
    return value


def error_names(error: int) -> list[str]:
    """The faults an error byte reports, by name."""
    return [name for bit, name in ERROR_BITS.items() if error & bit]
