"""Request bodies and WebSocket frames decoded with :mod:`console.jsonsafe`: bad input is a 4xx, never a 500.

- :class:`SafeJSONParser` is DRF's JSON parser for every API view (``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``):
  JSON nested deeper than ``jsonsafe.MAX_DEPTH`` or that is not JSON is a 400 ``parse_error``; a NUL character
  in a string is a 400 ``invalid`` at the string's path.
- :class:`SafeJsonWebsocketConsumer` is the base of every JSON WebSocket consumer: a frame that is not such JSON
  (too deep, malformed, binary) is answered with ``{"type": "error", "message": ...}`` and the socket stays
  open, where channels' own consumer raised and the socket closed with 1011.
"""

from __future__ import annotations

import json
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from console import jsonsafe


class SafeJSONParser(JSONParser):
    """``application/json`` bodies through :func:`console.jsonsafe.loads` (depth and NUL limits, no NaN)."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding") or "utf-8"
        try:
            return jsonsafe.loads(stream.read().decode(encoding))
        except jsonsafe.JsonRejected as exc:
            if exc.path:
                raise exceptions.ValidationError({exc.path: [exc.message]}) from None
            raise exceptions.ParseError(f"JSON parse error - {exc.message}") from None
        except ValueError as exc:  # not JSON, or not in the declared encoding
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None


class SafeJsonWebsocketConsumer(AsyncJsonWebsocketConsumer):
    """channels' JSON consumer, but a bad frame gets an error frame instead of killing the socket (1011)."""

    @classmethod
    async def decode_json(cls, text_data: str) -> Any:
        return jsonsafe.loads(text_data)

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        if not text_data:
            await self.send_json({"type": "error", "message": "send a JSON text frame"})
            return
        try:
            content = await self.decode_json(text_data)
        except jsonsafe.JsonRejected as exc:
            where = f" at {exc.path}" if exc.path else ""
            await self.send_json({"type": "error", "message": f"{exc.message}{where}"})
            return
        except ValueError as exc:
            message = f"not JSON: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else f"not JSON: {exc}"
            await self.send_json({"type": "error", "message": message})
            return
        await self.receive_json(content, **kwargs)
