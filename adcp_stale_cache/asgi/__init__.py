"""The ASGI front door: the middleware and how it reads requests and apps."""
