def route(messages: list[tuple]) -> tuple[list[int], list[tuple]]:
    stops: dict[int, set[int]] = {}  # open streams: uid -> its stop ids
    counts: dict[int, int] = {}
    to_scheduler, to_client = [], []
    for kind, uid, *rest in messages:
        if kind == "open":
            stops[uid], counts[uid] = set(rest[0]), 0
        elif uid not in stops:
            continue  # closed or unknown: a late token, a late abort
        elif kind == "abort":
            del stops[uid]
            to_client.append((uid, None, "abort", counts[uid]))
            to_scheduler.append(uid)
        else:
            token, reason = rest
            counts[uid] += 1
            if token in stops[uid]:
                to_client.append((uid, None, "stop", counts[uid]))
                if reason is None:  # the scheduler still runs it
                    to_scheduler.append(uid)
                del stops[uid]
            else:
                to_client.append((uid, token, reason, counts[uid]))
                if reason is not None:
                    del stops[uid]
    return to_scheduler, to_client
