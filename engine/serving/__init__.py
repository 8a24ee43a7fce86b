"""The engine as a service: the asyncio step loop, the wire protocol, its HTTP server and the gateway's client."""
