from console.roles import user_roles


def roles(request):
    """Expose the user's roles to every template (for the header and for hiding what they cannot do)."""
    user = getattr(request, "user", None)
    if user is None:
        return {}
    return {"user_roles": user_roles(user)}
