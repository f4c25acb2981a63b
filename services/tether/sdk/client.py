"""A synchronous client of the frontend's REST API (docs/protocol.md, "The frontend's REST API")."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from tether import __version__
from tether.model import check_name, parse_job_handle
from tether.sdk import events
from tether.sdk.errors import TetherAPIError, TetherConnectionError, problem_error
from tether.sdk.events import Followed
from tether.sdk.settings import ClientSettings
from tether.sdk.views import (
    AcceleratorReportView,
    EntitlementUseView,
    EphemeralResourceView,
    HostProfileView,
    JobView,
    MachineDrainView,
    MachineUndrainView,
    MachineView,
    MaintenanceView,
    OperationView,
    PlacementView,
    PrincipalToken,
    QueueView,
    RebalanceRunView,
    RegionView,
    ResourceStateView,
    ShardDetailView,
    ShardDrainView,
    ShardFailoverView,
    ShardMoveView,
    TaskView,
    View,
)
from tether.tls import client_context

JSON = "application/json"
YAML = "application/yaml"
PROBLEM = "application/problem+json"

IDEMPOTENCY_KEY: Final = "Idempotency-Key"
DEFAULT_TAIL_BYTES = 64 * 1024
"""How much of a task's log `task_logs` (and `tether task logs`) reads by default."""

LogStream = Literal["stdout", "stderr"]
V = TypeVar("V", bound=View)


class TetherClient:
    """Calls one frontend; every method raises TetherAPIError or TetherConnectionError.

    Job handles are `<entitlement>/<job>` and are checked (ValueError) before any request.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        ca_file: Path | None = None,
    ) -> None:
        """`ca_file`: the CA that signed the frontend's certificate, for a region with its own CA
        (else an https:// frontend is verified against the system's CAs)."""
        self.url = url.rstrip("/")
        headers = {"User-Agent": f"tether-sdk/{__version__}", "Accept": f"{JSON}, {PROBLEM}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            verify=client_context(ca_file),
        )
        self._written = 0
        """The store revision of this client's newest write: its reads see at least that."""

    @classmethod
    def from_settings(
        cls, settings: ClientSettings | None = None, *, transport: httpx.BaseTransport | None = None
    ) -> Self:
        """A client for the configured region (TETHER_URL, TETHER_TOKEN, `.tether/region.json`)."""
        settings = settings or ClientSettings()
        token = settings.token.get_secret_value() if settings.token else None
        return cls(
            settings.url,
            token,
            timeout_s=settings.timeout_s,
            transport=transport,
            ca_file=settings.ca_file,
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # Jobs

    def submit_job(
        self,
        spec: str | bytes | Mapping[str, Any],
        content_type: str = JSON,
        idempotency_key: str | None = None,
    ) -> JobView:
        """Submit a JobSpec: a mapping (sent as JSON) or its JSON/YAML text in `content_type`.

        Without an `idempotency_key` one is made up, so that the request can be sent again
        when the connection drops before the answer: the job is never submitted twice.
        """
        body: str | bytes
        if isinstance(spec, Mapping):
            body, content_type = json.dumps(spec), JSON
        else:
            body = spec
        headers = {
            "Content-Type": content_type,
            IDEMPOTENCY_KEY: idempotency_key or f"sdk-{uuid.uuid4().hex}",
        }
        return _view(JobView, self._request("POST", "/v1/jobs", content=body, headers=headers))

    def list_jobs(self, entitlement: str | None = None) -> list[JobView]:
        """Jobs the principal can see, optionally of one entitlement."""
        params = {"entitlement": entitlement} if entitlement else None
        return _views(JobView, self._request("GET", "/v1/jobs", params=params), "jobs")

    def get_job(self, handle: str) -> JobView:
        """One job with its task counts by state."""
        return _view(JobView, self._request("GET", _job_path(handle)))

    def scale_job(self, handle: str, count: int) -> JobView:
        """Change the job's task count; the frontend bumps its generation."""
        response = self._request("POST", f"{_job_path(handle)}/scale", json={"count": count})
        return _view(JobView, response)

    def update_job(self, handle: str, version: str) -> JobView:
        """Roll out another package version through the job's TaskController."""
        response = self._request("PATCH", _job_path(handle), json={"version": version})
        return _view(JobView, response)

    def suspend_job(self, handle: str) -> JobView:
        """Suspend a batch job: its tasks stop with notice, and it holds no quota."""
        response = self._request("PATCH", _job_path(handle), json={"suspended": True})
        return _view(JobView, response)

    def resume_job(self, handle: str, placement: dict[str, Any] | None = None) -> JobView:
        """Resume a suspended job, with another placement if given (a `Placement` as JSON):
        it is admitted again at its place in its entitlement's queue."""
        body: dict[str, Any] = {"suspended": False}
        if placement is not None:
            body["placement"] = placement
        response = self._request("PATCH", _job_path(handle), json=body)
        return _view(JobView, response)

    def request_operations(
        self, handle: str, kind: str, tasks: list[int] | None = None, reason: str = ""
    ) -> list[OperationView]:
        """Ask to `restart` or `move` tasks (default: all); the job's TaskController approves
        each, like any other operation."""
        body: dict[str, Any] = {"kind": kind, "reason": reason}
        if tasks is not None:
            body["tasks"] = tasks
        response = self._request("POST", f"{_job_path(handle)}/operations", json=body)
        return _views(OperationView, response, "operations")

    def list_operations(self, handle: str) -> list[OperationView]:
        """The job's open task operations, and completed ones its controller has not heard of."""
        response = self._request("GET", f"{_job_path(handle)}/operations")
        return _views(OperationView, response, "operations")

    def schedule_maintenance(self, request: Mapping[str, Any]) -> MaintenanceView:
        """Schedule maintenance (operator role); `request` is a MaintenanceRequest."""
        return _view(MaintenanceView, self._request("POST", "/v1/maintenance", json=request))

    def list_maintenance(self) -> list[MaintenanceView]:
        """Maintenance scheduled or under way, soonest first."""
        return _views(MaintenanceView, self._request("GET", "/v1/maintenance"), "maintenance")

    def cancel_maintenance(self, notice_id: str) -> MaintenanceView:
        """Cancel maintenance (operator role): its machines go back up at once."""
        path = f"/v1/maintenance/{quote(notice_id, safe='')}"
        return _view(MaintenanceView, self._request("DELETE", path))

    def delete_job(self, handle: str) -> None:
        """Start deleting the job; it disappears once the scheduler has stopped every task."""
        self._request("DELETE", _job_path(handle))

    def explain(self, handle: str) -> PlacementView:
        """Why the job's tasks are placed where they are, or why they cannot be placed, as an
        allocator sees it now: each hard rule's rejections, the preferences, the chosen machines."""
        return _view(PlacementView, self._request("GET", f"{_job_path(handle)}/placement"))

    def list_queues(self) -> list[EntitlementUseView]:
        """What each entitlement you may see reserves, borrows and lends, and its jobs waiting,
        as its tree's decider last reported."""
        return _views(EntitlementUseView, self._request("GET", "/v1/queues"), "queues")

    def get_queue(self, entitlement: str, *, offset: int = 0, limit: int = 1000) -> QueueView:
        """`limit` of the entitlement's waiting jobs from `offset`, in the order it admits
        them, and its use."""
        params = {"offset": offset, "limit": limit}
        return _view(QueueView, self._request("GET", f"/v1/queues/{entitlement}", params=params))

    def list_tasks(self, handle: str) -> list[TaskView]:
        """Every task of the job with its effective state."""
        return _views(TaskView, self._request("GET", f"{_job_path(handle)}/tasks"), "tasks")

    def task_logs(
        self,
        handle: str,
        index: int,
        stream: LogStream = "stdout",
        tail_bytes: int = DEFAULT_TAIL_BYTES,
    ) -> bytes:
        """The last `tail_bytes` bytes of a task's stdout or stderr, as its agent has them."""
        response = self._request(
            "GET",
            f"{_job_path(handle)}/tasks/{index}/logs",
            params={"stream": stream, "tail_bytes": tail_bytes},
        )
        return response.content

    # Region

    def ready(self) -> bool:
        """Whether the frontend answers and the region is initialised (`GET /readyz`)."""
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def list_machines(self) -> list[MachineView]:
        """Machines with their state, capacity, allocated and free resources."""
        return _views(MachineView, self._request("GET", "/v1/machines"), "machines")

    def drain_machine(
        self, machine_id: str, deadline_s: int | None = None, reason: str = ""
    ) -> MachineDrainView:
        """Admin: drain the machine; its tasks must be off it within `deadline_s` (None: the
        region's default, 0: at once). Repeating it changes nothing."""
        return self._drain("drain", machine_id, deadline_s, reason)

    def decommission_machine(
        self, machine_id: str, deadline_s: int | None = None, reason: str = ""
    ) -> MachineDrainView:
        """Admin: drain the machine, then take it out of the region for good once it is empty."""
        return self._drain("decommission", machine_id, deadline_s, reason)

    def undrain_machine(self, machine_id: str) -> MachineUndrainView:
        """Admin: undo the machine's drain and decommission; it goes back up."""
        path = f"/admin/machines/{quote(machine_id, safe='')}/undrain"
        return _view(MachineUndrainView, self._request("POST", path))

    def _drain(
        self, verb: str, machine_id: str, deadline_s: int | None, reason: str
    ) -> MachineDrainView:
        body: dict[str, Any] = {"reason": reason}
        if deadline_s is not None:
            body["deadline_s"] = deadline_s
        path = f"/admin/machines/{quote(machine_id, safe='')}/{verb}"
        return _view(MachineDrainView, self._request("POST", path, json=body))

    def region(self) -> RegionView:
        """Shard leaders, allocators, machines, jobs and tasks by state."""
        return _view(RegionView, self._request("GET", "/v1/region"))

    # Throughput profiles

    def put_throughput_profile(self, handle: str, throughputs: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace the profile `<entitlement>/<name>`: {accelerator type: {job type:
        {scale factor: steps per second}}} (Gavel's isolated_throughputs.json format)."""
        body = {"throughputs": dict(throughputs)}
        response = self._request("PUT", _throughput_profile_path(handle), json=body)
        return _object(response, "a throughput profile")

    def get_throughput_profile(self, handle: str) -> dict[str, Any]:
        """The profile `<entitlement>/<name>`: its `throughputs` table."""
        response = self._request("GET", _throughput_profile_path(handle))
        return _object(response, "a throughput profile")

    # Ephemeral resources (ESCHER)

    def set_resource(
        self,
        entitlement: str,
        label: str,
        capacity: int,
        node_spec: Mapping[str, Any] | None = None,
        *,
        owner_job: str | None = None,
        ttl_s: float | None = None,
    ) -> EphemeralResourceView:
        """Gives every machine `node_spec` matches (`{"machine": id}`, `{"constraints":
        [...]}`, or None for every machine) `capacity` of the entitlement's `label`; its tasks
        ask for it in `resources.extra`. `owner_job` or `ttl_s` end it."""
        body: dict[str, Any] = {
            "entitlement": entitlement,
            "label": label,
            "capacity": capacity,
            "node_spec": dict(node_spec or {}),
        }
        if owner_job is not None:
            body["owner_job"] = owner_job
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return _view(EphemeralResourceView, self._request("POST", "/v1/resources", json=body))

    def get_cluster_state(
        self, entitlement: str | None = None, *, label: str | None = None, limit: int = 1000
    ) -> list[ResourceStateView]:
        """The ephemeral resources the principal may see (of `entitlement`, with `label`),
        each with its machines' capacity, what is held and what is free."""
        params: dict[str, Any] = {"limit": limit}
        if entitlement is not None:
            params["entitlement"] = entitlement
        if label is not None:
            params["label"] = label
        response = self._request("GET", "/v1/resources", params=params)
        return _views(ResourceStateView, response, "resources")

    def delete_resource(self, entitlement: str, label: str) -> EphemeralResourceView:
        """Deletes the label (running tasks keep what they hold)."""
        path = (
            f"/v1/resources/{check_name(entitlement, 'entitlement')}/{check_name(label, 'label')}"
        )
        return _view(EphemeralResourceView, self._request("DELETE", path))

    # Entitlements and principals

    def list_entitlements(self) -> list[dict[str, Any]]:
        """Entitlements the principal belongs to (all of them for admins)."""
        return _list(self._request("GET", "/v1/entitlements"), "entitlements")

    def create_entitlement(self, entitlement: Mapping[str, Any]) -> dict[str, Any]:
        """Admin: create an entitlement (an `Entitlement` body); the frontend assigns a shard."""
        response = self._request("POST", "/v1/entitlements", json=dict(entitlement))
        return _object(response, "an entitlement object")

    def list_shards(self) -> list[ShardDetailView]:
        """Admin: every scheduler shard with its replicas, its leader's last report and what
        it holds."""
        return _views(ShardDetailView, self._request("GET", "/admin/shards"), "shards")

    def add_shard(self, shard: str) -> ShardDetailView:
        """Admin: add a shard to the region (or stop a draining one draining)."""
        return _view(ShardDetailView, self._request("POST", "/admin/shards", json={"id": shard}))

    def move_entitlement(self, shard: str, entitlement: str, to: str | None) -> ShardMoveView:
        """Admin: move an entitlement off `shard`, to `to` or the least-loaded other shard."""
        body = {"entitlement": entitlement} | ({"to": to} if to is not None else {})
        return _view(ShardMoveView, self._request("POST", f"/admin/shards/{shard}/move", json=body))

    def fail_over(self, shard: str) -> ShardFailoverView:
        """Admin: depose the shard's leader so that a standby takes over."""
        return _view(ShardFailoverView, self._request("POST", f"/admin/shards/{shard}/failover"))

    def drain_shard(self, shard: str) -> ShardDrainView:
        """Admin: move all of the shard's entitlements away; it takes no new ones."""
        return _view(ShardDrainView, self._request("POST", f"/admin/shards/{shard}/drain"))

    def ask_rebalance(self, *, dry_run: bool, strategies: list[str]) -> RebalanceRunView:
        """Admin: ask the rebalancer for a round: a plan (`dry_run`) or moves proposed."""
        body = {"dry_run": dry_run, "strategies": strategies}
        return _view(RebalanceRunView, self._request("POST", "/admin/rebalance/runs", json=body))

    def get_rebalance(self, run_id: str) -> RebalanceRunView:
        """Admin: a rebalancer run, pending, done or failed."""
        return _view(RebalanceRunView, self._request("GET", f"/admin/rebalance/runs/{run_id}"))

    def list_rebalances(self) -> list[RebalanceRunView]:
        """Admin: the rebalancer runs kept, newest first."""
        return _views(RebalanceRunView, self._request("GET", "/admin/rebalance/runs"), "runs")

    def put_accelerator_report(
        self, entitlement: str, report: Mapping[str, Any]
    ) -> AcceleratorReportView:
        """A member of `entitlement` (its Gavel runner): replace the entitlement's accelerator
        report with `report` (an AcceleratorRound: policy, round_s, rounds, accelerators,
        jobs)."""
        check_name(entitlement, "entitlement")
        path = f"/v1/accelerator-reports/{entitlement}"
        return _view(AcceleratorReportView, self._request("PUT", path, json=dict(report)))

    def create_principal(self, name: str, roles: list[str]) -> PrincipalToken:
        """Admin: create a principal; the answer holds its token, shown only this once."""
        response = self._request("POST", "/admin/principals", json={"name": name, "roles": roles})
        return _view(PrincipalToken, response)

    # Host profiles

    def list_host_profiles(self) -> list[HostProfileView]:
        """Every host profile, by name."""
        response = self._request("GET", "/v1/host-profiles")
        return _views(HostProfileView, response, "host_profiles")

    def get_host_profile(self, name: str) -> HostProfileView:
        """One host profile."""
        return _view(HostProfileView, self._request("GET", _profile_path(name)))

    def create_host_profile(self, profile: Mapping[str, Any]) -> HostProfileView:
        """Admin: create a host profile (a `HostProfile` body); a name is used only once."""
        response = self._request("POST", "/v1/host-profiles", json=dict(profile))
        return _view(HostProfileView, response)

    def delete_host_profile(self, name: str) -> HostProfileView:
        """Admin: delete a host profile that nothing uses; answers with what was deleted."""
        return _view(HostProfileView, self._request("DELETE", _profile_path(name)))

    # Events

    def events(
        self,
        *,
        entitlement: str | None = None,
        job: str | None = None,
        machine: str | None = None,
        kinds: Sequence[str] = (),
        follow: bool = True,
        since: int | None = None,
        on_drop: Callable[[str, int | None], None] | None = None,
    ) -> Iterator[Followed]:
        """The region's events (`GET /v1/events`) that the filters select, in store order:
        from now on, or after revision `since`. Following, a dropped connection is opened again
        after the last revision seen (`on_drop` is told why, and that revision); without
        `follow`, the events up to now. An `EventGapView` and a `RegionSnapshotView` stand for
        events no longer kept."""
        if job is not None:
            parse_job_handle(job)
        params: dict[str, Any] = {"kind": list(kinds), "follow": "true" if follow else "false"}
        params |= {
            name: value
            for name, value in (("entitlement", entitlement), ("job", job), ("machine", machine))
            if value is not None
        }
        return events.follow(self._http, params, since=since, reconnect=follow, on_drop=on_drop)

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Sends the request; once more when the connection dropped before the answer (a
        server closing a kept-alive connection as it is reused) and sending it again cannot
        apply it twice."""
        if method == "GET" and self._written:
            # Read-your-writes: a frontend answers from a cache a moment behind the store.
            kwargs["params"] = {**(kwargs.get("params") or {}), "min_revision": self._written}
        try:
            response = self._send(method, path, kwargs)
        except httpx.TransportError as exc:
            raise TetherConnectionError(self.url, str(exc) or type(exc).__name__) from exc
        if response.is_error:
            raise problem_error(response)
        if method != "GET" and REVISION_HEADER in response.headers:
            self._written = max(self._written, int(response.headers[REVISION_HEADER]))
        return response

    def _send(self, method: str, path: str, kwargs: dict[str, Any]) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except _DROPPED as exc:
            if not _resendable(method, kwargs.get("headers") or {}):
                raise
            dropped = exc
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise exc from dropped


REVISION_HEADER: Final = "X-Tether-Revision"
"""The store revision an answer reflects (docs/protocol.md, "Reads and the cache")."""

_DROPPED: Final = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
"""The connection broke after the request may have been sent (a refused connection is a
ConnectError: nothing was sent, and nothing is sent again either)."""


def _resendable(method: str, headers: Mapping[str, str]) -> bool:
    """Whether sending the request twice has the effect of sending it once: a read, a PATCH
    (this API's set a version), or a POST carrying an Idempotency-Key."""
    if method in ("GET", "HEAD", "PUT", "PATCH"):
        return True
    return method == "POST" and IDEMPOTENCY_KEY in headers


def _job_path(handle: str) -> str:
    entitlement, name = parse_job_handle(handle)
    return f"/v1/jobs/{entitlement}/{name}"


def _throughput_profile_path(handle: str) -> str:
    """`<entitlement>/<name>`'s path; ValueError naming what is wrong with it."""
    entitlement, _, name = handle.partition("/")
    check_name(entitlement, "entitlement")
    check_name(name, "throughput profile")
    return f"/v1/throughput-profiles/{entitlement}/{name}"


def _profile_path(name: str) -> str:
    return f"/v1/host-profiles/{quote(name, safe='')}"


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise _unexpected(response.status_code, "JSON", response.text) from None


def _view(view: type[V], response: httpx.Response) -> V:
    try:
        return view.model_validate(_json(response))
    except ValidationError as exc:
        raise _unexpected(response.status_code, f"a {view.__name__}", str(exc)) from None


def _object(response: httpx.Response, what: str) -> dict[str, Any]:
    body = _json(response)
    if not isinstance(body, dict):
        raise _unexpected(response.status_code, what)
    return body


def _list(response: httpx.Response, key: str) -> list[Any]:
    """The list under `key` of the response's JSON object."""
    body = _json(response)
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise _unexpected(response.status_code, f'an object with a "{key}" list')
    return items


def _views(view: type[V], response: httpx.Response, key: str) -> list[V]:
    items = _list(response, key)
    try:
        return [view.model_validate(item) for item in items]
    except ValidationError as exc:
        raise _unexpected(response.status_code, f"a list of {view.__name__}", str(exc)) from None


def _unexpected(status: int, wanted: str, got: str = "") -> TetherAPIError:
    detail = f"expected {wanted} from the frontend" + (f": {got[:300]}" if got else "")
    return TetherAPIError(status, "Unexpected response", detail)
