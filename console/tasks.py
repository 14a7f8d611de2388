from celery import shared_task


@shared_task(name="console.ping", ignore_result=False)
def ping() -> str:
    """Round trip for the health check: proves a worker consumes the queue and results come back."""
    return "pong"
