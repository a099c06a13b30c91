"""The cluster page: every node with its GPUs (coloured by allocation, filled by measured
utilisation), CPU, memory and disk, health and cordon state, refreshed by htmx polling;
cordon and uncordon for admins.

The figures are ``live.node_page``, as ``GET /nodes`` answers them: a non-admin sees which
GPUs are taken but only their own jobs' ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import RedirectResponse, Response

from trainyard.portal.auth import AdminAction, Page, Viewer
from trainyard.portal.templating import SECURITY_HEADERS, render
from trainyard.schemas.cluster import GpuView, NodeView
from trainyard.services import cluster_actions
from trainyard.web.bodies import PathName
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
REFRESH_SECONDS = 5  # the node grid's polling period
NODES_PER_PAGE = 50  # ~2.5 KB of page a node of 8 GPUs: a page stays well under 200 KB


@dataclass(frozen=True)
class GpuBox:
    """How one GPU is drawn: its allocation class, its utilisation fill (tenths), its tooltip."""

    gpu: GpuView
    allocation: str  # free | partly | fully
    fill: int  # 0..10: measured utilisation in tenths; 0 when not measured
    tooltip: str


@dataclass(frozen=True)
class NodeCard:
    node: NodeView
    health: str  # sampled | stale | unhealthy
    gpus: list[GpuBox]


def _figure(value: float | int | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:.0f}{unit}"


def gpu_box(gpu: GpuView) -> GpuBox:
    allocation = "free" if gpu.used <= 0 else "fully" if gpu.used >= 1 else "partly"
    usage = gpu.usage
    util = usage.utilPct if usage is not None else None
    lines = [
        f"GPU {gpu.index}: {gpu.model}{' (simulated)' if gpu.simulated else ''}, {gpu.memoryMB / 1024:.0f} GiB",
        (f"allocated {gpu.used:.0%}" if gpu.used else "free")
        + (", jobs " + ", ".join(str(j) for j in gpu.jobs) if gpu.jobs else ""),
        f"utilisation {_figure(util, ' %')}, memory used {_figure(usage.memoryUsedMB if usage else None, ' MiB')}",
        f"temperature {_figure(usage.temperatureC if usage else None, ' °C')}, "
        f"power {_figure(usage.powerW if usage else None, ' W')}",
    ]
    if usage is not None and not usage.healthy:
        lines.append("UNHEALTHY")
    fill = max(0, min(10, round((util or 0) / 10)))
    return GpuBox(gpu, allocation, fill, "\n".join(lines))


def node_card(node: NodeView) -> NodeCard:
    if node.usage is None:
        health = "stale"
    elif any(g.usage is not None and not g.usage.healthy for g in node.gpus):
        health = "unhealthy"
    else:
        health = "sampled"
    return NodeCard(node, health, [gpu_box(g) for g in node.gpus])


@dataclass(frozen=True)
class NodePage:
    cards: list[NodeCard]
    number: int  # from 1
    pages: int
    first: int  # the first node's position, from 1
    total: int


def _node_page(viewer: Viewer, ctx: AppContext, number: int) -> NodePage:
    page = cluster_actions.node_page(ctx, viewer.user, number, NODES_PER_PAGE)
    return NodePage([node_card(n) for n in page.nodes], page.number, page.pages, page.first + 1, page.total)


PageNumber = Annotated[int, Query(ge=1, le=1_000_000)]


@router.get("/cluster")
def cluster_page(request: Request, viewer: Page, ctx: Ctx, page: PageNumber = 1) -> Response:
    return render(request, "cluster.html", user=viewer.user, web_session=viewer.web_session,
                  grid=_node_page(viewer, ctx, page), refresh=REFRESH_SECONDS)


@router.get("/cluster/nodes")
def node_grid(request: Request, viewer: Page, ctx: Ctx, page: PageNumber = 1) -> Response:
    """The node grid alone: what the page's htmx polling swaps in."""
    return render(request, "cluster_nodes.html", user=viewer.user, web_session=viewer.web_session,
                  grid=_node_page(viewer, ctx, page))


@router.post("/cluster/nodes/{name}/cordon")
def cordon(name: PathName, _: AdminAction, ctx: Ctx) -> Response:
    return _set_cordon(ctx, name, True)


@router.post("/cluster/nodes/{name}/uncordon")
def uncordon(name: PathName, _: AdminAction, ctx: Ctx) -> Response:
    return _set_cordon(ctx, name, False)


def _set_cordon(ctx: AppContext, name: str, cordoned: bool) -> Response:
    """The same service as ``POST /api/v1/nodes/{name}/cordon``; then back to the page."""
    cluster_actions.set_cordon(ctx, name, cordoned)
    return RedirectResponse("/cluster", status_code=303, headers=SECURITY_HEADERS)
