"""The Windows service wrapper and the registry configuration the Windows enrollment writes.

Enrollment (installer/windows/enroll.ps1) registers the service as
`"<ProgramFiles>\\<Product>\\sensor-agent.exe" --service` and writes HKLM\\SOFTWARE\\<Product>:
TargetUrl, MachineId, ServerName, CertDir. The service (pywin32, bundled by the Windows spec)
builds the same Agent as the console does and stops it on the service-control stop request.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import PureWindowsPath
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_PRODUCT = "SensorAgent"


def settings_from_registry(values: dict[str, str]) -> dict[str, Any]:
    """Config overrides from the values enrollment writes under HKLM\\SOFTWARE\\<Product>."""
    out: dict[str, Any] = {}
    if values.get("TargetUrl"):
        out["target_url"] = values["TargetUrl"]
    if values.get("MachineId"):
        out["machine_id"] = values["MachineId"]
    if values.get("ServerName"):
        out["server_name"] = values["ServerName"]
    if values.get("CertDir"):
        certs = PureWindowsPath(values["CertDir"])
        out.update(ca_cert=str(certs / "ca.pem"), cert=str(certs / "agent.pem"), key=str(certs / "agent.key"))
    return out


def read_registry(product: str) -> dict[str, str]:  # pragma: no cover - Windows only
    values: dict[str, str] = {}
    if sys.platform != "win32":
        return values
    import winreg

    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, rf"SOFTWARE\{product}") as key:
            for name in ("TargetUrl", "MachineId", "ServerName", "CertDir"):
                try:
                    values[name] = str(winreg.QueryValueEx(key, name)[0])
                except FileNotFoundError:
                    pass
    except FileNotFoundError:
        pass
    return values


def run_service(product: str = DEFAULT_PRODUCT) -> int:  # pragma: no cover - Windows only
    """Hand the process to the service control manager; it calls back into SensorAgentService."""
    import servicemanager
    import win32event
    import win32service
    import win32serviceutil

    from agents.agent import RunOptions, build
    from agents.config import load_config

    class SensorAgentService(win32serviceutil.ServiceFramework):
        _svc_name_ = product
        _svc_display_name_ = f"{product} agent"

        def __init__(self, args: Any) -> None:
            super().__init__(args)
            self._stopped = win32event.CreateEvent(None, 0, 0, None)
            self._agent: Any = None

        def SvcStop(self) -> None:  # noqa: N802 (pywin32 name)
            self.ReportServiceStatus(win32service.SERVICE_STOP_PENDING)
            if self._agent is not None:
                self._agent.stop.set()
            win32event.SetEvent(self._stopped)

        def SvcDoRun(self) -> None:  # noqa: N802
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
            config = load_config(None, settings_from_registry(read_registry(product)))
            self._agent = build(config, RunOptions())
            worker = threading.Thread(target=self._agent.run, name="agent", daemon=True)
            worker.start()
            win32event.WaitForSingleObject(self._stopped, win32event.INFINITE)
            worker.join(10)

    servicemanager.Initialize()
    servicemanager.PrepareToHostSingle(SensorAgentService)
    servicemanager.StartServiceCtrlDispatcher()
    return 0


if __name__ == "__main__" and sys.platform == "win32":  # pragma: no cover
    sys.exit(run_service())
