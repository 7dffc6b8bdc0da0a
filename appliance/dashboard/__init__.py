"""The analyst console's server (`python -m appliance.dashboard`): accounts, sessions, the REST proxy, the web app.

The browser talks only to this process (port 3000). It signs users in, keeps their sessions on the
server, checks their role and CSRF token, and forwards allowed `/api/v1` calls to the appliance's
REST API with the admin token, which never leaves this process.
"""
