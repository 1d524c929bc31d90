"""What a service refuses, as exceptions the API answers with a status (api/errors.py maps each
class to one), so routes need no try/except per call.

    ServiceError          message and details, as the error JSON shows them
     ├─ Invalid           the request's mistake (400)
     ├─ NotFound          what it names does not exist (404)
     ├─ Conflict          not now, in the state it is in (409)
     ├─ StorageFailed     a checkpoint storage did not answer as it should (502)
     └─ Unavailable       Temporal (a workflow, a pool's scheduler) cannot be reached (503)
"""

from __future__ import annotations


class ServiceError(Exception):
    def __init__(self, message: str, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


class Invalid(ServiceError):
    pass


class NotFound(ServiceError):
    pass


class Conflict(ServiceError):
    pass


class StorageFailed(ServiceError):
    pass


class Unavailable(ServiceError):
    pass


def not_found(kind: str, ident: object) -> NotFound:
    return NotFound(f"{kind} {ident} not found")
