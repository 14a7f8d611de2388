from django.apps import AppConfig


class StreamsConfig(AppConfig):
    name = "streams"
    verbose_name = "Streams (turn engine, preview rooms, live sessions)"
