status=ok
echo "${status@U}"
