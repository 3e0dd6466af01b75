"""The benchmark client: when it sends each request and when it sees the request's first and last token."""
from __future__ import annotations

import math

from .frontend import FrontEnd
from .workload import RequestTable


class Client:
    """Sends requests to the front end and records what it sees (times in s).

    Closed loop: all requests are ready at once and at most ``concurrency`` are in flight; the next one goes
    out as soon as the client sees a request's last token. Open loop: each goes out at its arrival time (the
    same rule, with a concurrency above the load). Staggered start (``table.lead`` > 0): the first ``lead``
    requests are the users' first requests, each sent at its own arrival time (the user's phase) on a slot kept
    for it; the rest go in order as slots free, as each user sends its next request when it sees the last token
    of its previous one (whether or not a later user has joined yet). A request reaches the front end its
    ``delay`` after it is sent (the network, HTTP and the client's own event loop), and costs it ``t_token``
    per prompt token.
    """

    def __init__(self, table: RequestTable, concurrency: int, frontend: FrontEnd, t_token: float):
        self.arrival, self.L, self.n = table.arrival, table.L, table.n
        self.concurrency, self.frontend, self.t_token = concurrency, frontend, t_token
        self.sent = [math.nan] * table.n        # when each request was sent
        self.first = [math.nan] * table.n       # when its first token was seen
        self.done = [math.nan] * table.n        # when its last token was seen
        self.lead = min(getattr(table, "lead", 0), table.n, concurrency)   # users' first requests, own starts
        self.next_lead = 0                      # the next user's first request still to send
        self.next_req = self.lead               # the next request of the loop
        self.in_flight = 0
        self.slot_since = 0.0                   # since when the cap has let another request through
        self.stopped = False                    # the server failed: nothing more is sent
        self.delay = table.delay                # each request's network and HTTP delay to the front end (s)
        self.listener = None                    # called (request, is its last token, when) on every delivery

    def add(self) -> None:
        """One more request in the table (appended by a cluster as it routes requests here)."""
        self.n += 1
        self.sent.append(math.nan)
        self.first.append(math.nan)
        self.done.append(math.nan)

    def send(self, now: float) -> None:
        """Send every request whose time has come and that the concurrency cap lets through."""
        if self.stopped or (self.next_lead >= self.lead and (self.next_req >= self.n or
                                                               self.in_flight >= self.concurrency)):
            return                      # the usual case: every slot is taken, or nothing is left to send
        limit = now + 1e-12
        while self.next_lead < self.lead and self.arrival[self.next_lead] <= limit:
            self._go(self.next_lead, self.arrival[self.next_lead])       # a user joins on its kept slot
            self.next_lead += 1
        i, n, kept = self.next_req, self.n, self.lead - self.next_lead
        if i >= n or self.in_flight + kept >= self.concurrency:
            return
        arrival = self.arrival
        while i < n and self.in_flight + kept < self.concurrency and arrival[i] <= limit:
            # sent at its arrival, or when the cap let it through (the client does not wait for the server's
            # iterations, which only decide when this call comes)
            self._go(i, max(arrival[i], self.slot_since))
            i += 1
            self.next_req = i

    def _go(self, i: int, r: float) -> None:
        """Request ``i`` sent at ``r`` (s)."""
        self.sent[i] = r
        self.frontend.arrive(r + self.delay[i] if self.delay else r, i, self.t_token * self.L[i])
        self.in_flight += 1

    def deliver(self, payload: list, when: float) -> None:
        """Tokens reach the client at ``when``: ``payload`` holds (request, is its last token) pairs."""
        listener, first = self.listener, self.first
        for i, last in payload:
            if listener is not None:
                listener(i, last, when)
            if last:
                self.done[i] = when
                if self.in_flight + self.lead - self.next_lead >= self.concurrency:
                    self.slot_since = when
                self.in_flight -= 1
            elif first[i] != first[i]:                # NaN: its first token (a retracted request's re-prefill
                first[i] = when                        # sends another, which is not its first)
        if self.in_flight < self.concurrency or self.next_lead < self.lead:
            self.send(when)                            # else every slot is still taken: send would return

    def next_send(self) -> float:
        """When the next request will be sent if nothing else happens (inf: none can go before a delivery)."""
        t = self.arrival[self.next_lead] if self.next_lead < self.lead else math.inf
        if self.next_req < self.n and self.in_flight + self.lead - self.next_lead < self.concurrency:
            t = min(t, self.arrival[self.next_req])
        return t
