"""A WebSocket echo server on the standard library alone (a task's python3 has no
``websockets``): text and binary frames come back as sent; ``python3 ws_echo.py PORT``."""

import asyncio
import base64
import hashlib
import struct
import sys

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head.split("\r\n")[1:])}
    accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + GUID).encode()).digest()).decode()
    writer.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode())
    while True:
        first, second = await reader.readexactly(2)
        opcode, length = first & 0x0F, second & 0x7F
        if length == 126:
            (length,) = struct.unpack(">H", await reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack(">Q", await reader.readexactly(8))
        mask = await reader.readexactly(4) if second & 0x80 else b"\0\0\0\0"
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(await reader.readexactly(length)))
        if opcode == 0x9:  # ping
            opcode = 0xA
        header = bytes([0x80 | opcode])
        if len(payload) < 126:
            header += bytes([len(payload)])
        elif len(payload) < 1 << 16:
            header += bytes([126]) + struct.pack(">H", len(payload))
        else:
            header += bytes([127]) + struct.pack(">Q", len(payload))
        writer.write(header + payload)
        await writer.drain()
        if opcode == 0x8:  # close: answered, done
            writer.close()
            return


async def main() -> None:
    server = await asyncio.start_server(serve, "0.0.0.0", int(sys.argv[1]))
    async with server:
        await server.serve_forever()


asyncio.run(main())
