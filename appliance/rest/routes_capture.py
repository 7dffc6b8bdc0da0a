"""The appliance's own port capture: interfaces, status, start, stop (admin only)."""

from __future__ import annotations

from appliance.capture import AlreadyRunning, UnknownInterface
from appliance.capture.interfaces import InterfaceCatalog
from appliance.capture.model import CaptureStatus, InterfaceList, StartRequest
from appliance.capture.supervisor import CaptureSupervisor
from appliance.errors import ApiError
from appliance.rest.api import Api

TAG = "capture"


def install(api: Api, *, supervisor: CaptureSupervisor, catalog: InterfaceCatalog) -> None:
    """Declare the capture routes on `api`."""

    @api.route("GET", "/api/v1/capture/interfaces", "Network interfaces of the appliance (netlink): name, state, "
               "MAC, addresses, speed, promiscuous", tag=TAG, reply=InterfaceList)
    def interfaces() -> InterfaceList:
        return InterfaceList(interfaces=catalog.list())

    @api.route("GET", "/api/v1/capture", "The port capture: status, interface, counters, protocolStats, uptime, "
               "last error", tag=TAG, reply=CaptureStatus)
    def status() -> CaptureStatus:
        return supervisor.status()

    @api.route("POST", "/api/v1/capture/start", "Start capturing on an interface (422 unknown or down interface, "
               "409 already running); omitted fields take the console settings' capture section",
               tag=TAG, body=StartRequest, reply=CaptureStatus)
    def start(body: StartRequest) -> CaptureStatus:
        try:
            return supervisor.begin(body)
        except UnknownInterface as err:
            raise ApiError(422, str(err), code="UNKNOWN_INTERFACE", field="interface",
                           fields={"interface": str(err)}) from err
        except AlreadyRunning as err:
            raise ApiError(409, str(err), code="ALREADY_RUNNING") from err

    @api.route("POST", "/api/v1/capture/stop", "Stop the capture (idempotent); it no longer starts with the appliance",
               tag=TAG, reply=CaptureStatus)
    def stop() -> CaptureStatus:
        return supervisor.end()
