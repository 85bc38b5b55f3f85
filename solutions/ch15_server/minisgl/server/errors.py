"""Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with an HTTP status, whatever failed.

A request the server refuses raises APIError; the handlers added here turn it, and every other way a request can
fail (a body FastAPI cannot parse, an unknown path or method, a bug), into that one body, so a client never parses
two kinds of error.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class APIError(Exception):
    """An error the client gets as {"error": {"message", "type", "param", "code"}} with an HTTP status."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self, headers: dict | None = None) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def unavailable(reason: str) -> APIError:
    """A 503: a worker died, or the server is shutting down."""
    return APIError(503, reason, type="service_unavailable")


def add_error_handlers(app: FastAPI) -> None:
    """Every failure of a request answers in OpenAI's error shape."""

    @app.exception_handler(APIError)
    async def api_error(_: Request, e: APIError) -> JSONResponse:
        return e.response()

    @app.exception_handler(Exception)
    async def internal_error(_: Request, e: Exception) -> JSONResponse:
        """A bug, not a bad request: the client gets a 500 that names it, and the server goes on serving."""
        return APIError(500, f"internal error: {type(e).__name__}: {e}", type="internal_server_error").response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        """An unknown path or a wrong method, in OpenAI's words."""
        where = f"{request.method} {request.url.path}"
        message = {404: f"Invalid URL ({where})", 405: f"Invalid method for URL ({where})"}.get(e.status_code,
                                                                                              str(e.detail))
        return APIError(e.status_code, message).response(headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, e: RequestValidationError) -> JSONResponse:
        """A body (or query) that does not parse: a 400 naming the first field at fault."""
        err = e.errors()[0]
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query")]
        where = ".".join(loc)
        if err.get("type") == "json_invalid":
            return APIError(400, f"the body is not valid JSON: {err.get('msg')}").response()
        if err.get("type") == "extra_forbidden":
            message = f"unsupported parameter: {where}"
        else:
            message = f"{where or 'body'}: {err.get('msg')}"
        return APIError(400, message, param=loc[0] if loc else None).response()
