"""The shared HTTP layer: waitress server and ``DirectServer`` (a thread per connection, for the
cluster, admission and worker listeners), bearer auth, body caps, strict JSON, pooled client.

See docs/http.md for the rules every surface follows (auth before body, caps at the boundary,
one JSON error shape, a client that never follows redirects nor retries on its own).
"""

from appliance.http.app import create_app
from appliance.http.auth import BearerAuth, CredentialTable, parse_bearer
from appliance.http.client import (
    AmbiguousSend,
    ClientError,
    ConnectFailed,
    HttpClient,
    InvalidUrl,
    Response,
    ResponseTooLarge,
)
from appliance.http.errors import ApiError, error_body
from appliance.http.limits import BodyCap, parse_json_object, read_body, read_json_object
from appliance.http.server import AddressInUse, HttpServer, ServerError

__all__ = [
    "AddressInUse",
    "AmbiguousSend",
    "ApiError",
    "BearerAuth",
    "BodyCap",
    "ClientError",
    "ConnectFailed",
    "CredentialTable",
    "HttpClient",
    "HttpServer",
    "InvalidUrl",
    "Response",
    "ResponseTooLarge",
    "ServerError",
    "create_app",
    "error_body",
    "parse_bearer",
    "parse_json_object",
    "read_body",
    "read_json_object",
]
